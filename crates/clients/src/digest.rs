//! SHA-256 as lowercase hex, the one digest format bprun writes (chart digests, file hashes, the
//! simulators' token digests and blob ids).

use sha2::Digest;

/// The SHA-256 of `bytes` as 64 lowercase hex digits.
pub fn sha256_hex(bytes: impl AsRef<[u8]>) -> String {
    sha2::Sha256::digest(bytes.as_ref())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_digest() {
        assert_eq!(
            super::sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
