//! The protobuf wire format: a reader of tagged fields that never panics on bad input and names
//! the absolute offset of every error.

#[derive(Clone, Copy, Debug)]
pub(super) enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    /// Payload and its absolute offset in the body.
    Len(&'a [u8], usize),
    /// A whole (already skipped) group.
    Group,
    Fixed32,
}

impl Wire<'_> {
    fn name(&self) -> &'static str {
        match self {
            Wire::Varint(_) => "0 (varint)",
            Wire::Fixed64(_) => "1 (64-bit)",
            Wire::Len(..) => "2 (length-delimited)",
            Wire::Group => "3 (group)",
            Wire::Fixed32 => "5 (32-bit)",
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Field<'a> {
    pub(super) num: u64,
    wire: Wire<'a>,
    /// Absolute offset of the field's tag in the body.
    offset: usize,
}

pub(super) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Absolute offset of `buf[0]` in the body, for error messages.
    base: usize,
    msg: &'static str,
}

impl<'a> Reader<'a> {
    pub(super) fn new(buf: &'a [u8], base: usize, msg: &'static str) -> Self {
        Reader {
            buf,
            pos: 0,
            base,
            msg,
        }
    }

    fn at(&self) -> usize {
        self.base + self.pos
    }

    fn varint(&mut self) -> Result<u64, String> {
        let start = self.at();
        let mut value: u64 = 0;
        for i in 0..10 {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(format!(
                    "protobuf: {}: truncated varint at offset {start}",
                    self.msg
                ));
            };
            self.pos += 1;
            if i == 9 && b > 1 {
                return Err(format!(
                    "protobuf: {}: varint overflows 64 bits at offset {start}",
                    self.msg
                ));
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(format!(
            "protobuf: {}: varint longer than 10 bytes at offset {start}",
            self.msg
        ))
    }

    fn skip(&mut self, n: usize, what: &str) -> Result<usize, String> {
        let start = self.pos;
        if self.buf.len() - self.pos < n {
            return Err(format!(
                "protobuf: {}: truncated {what} at offset {}: need {n} bytes, {} left",
                self.msg,
                self.at(),
                self.buf.len() - self.pos
            ));
        }
        self.pos += n;
        Ok(start)
    }

    fn tag(&mut self) -> Result<(u64, u8, usize), String> {
        let offset = self.at();
        let key = self.varint()?;
        let num = key >> 3;
        let wire = (key & 7) as u8;
        if num == 0 || num > 0x1fff_ffff {
            return Err(format!(
                "protobuf: {}: invalid field number {num} at offset {offset}",
                self.msg
            ));
        }
        Ok((num, wire, offset))
    }

    /// Reads the next field; `None` at the end of the message.
    pub(super) fn next_field(&mut self) -> Result<Option<Field<'a>>, String> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let (num, wire, offset) = self.tag()?;
        let wire = match wire {
            3 => {
                self.skip_group(num, offset)?;
                Wire::Group
            }
            4 => {
                return Err(format!(
                    "protobuf: {}: unexpected end-group for field {num} at offset {offset}",
                    self.msg
                ));
            }
            wire => self.payload(wire, num, offset)?,
        };
        Ok(Some(Field { num, wire, offset }))
    }

    /// Reads the payload of a field of wire type 0, 1, 2 or 5 (groups are the caller's).
    fn payload(&mut self, wire: u8, num: u64, offset: usize) -> Result<Wire<'a>, String> {
        Ok(match wire {
            0 => Wire::Varint(self.varint()?),
            1 => {
                let start = self.skip(8, "64-bit field")?;
                let mut le = [0u8; 8];
                le.copy_from_slice(&self.buf[start..start + 8]);
                Wire::Fixed64(u64::from_le_bytes(le))
            }
            2 => {
                let len_at = self.at();
                let len = self.varint()?;
                let len = usize::try_from(len)
                    .ok()
                    .filter(|&l| l <= self.buf.len() - self.pos)
                    .ok_or_else(|| {
                        format!(
                            "protobuf: {}: field {num} length {len} at offset {len_at} exceeds the {} remaining bytes",
                            self.msg,
                            self.buf.len() - self.pos
                        )
                    })?;
                let start = self.skip(len, "length-delimited field")?;
                Wire::Len(&self.buf[start..start + len], self.base + start)
            }
            5 => {
                self.skip(4, "32-bit field")?;
                Wire::Fixed32
            }
            w => {
                return Err(format!(
                    "protobuf: {}: invalid wire type {w} for field {num} at offset {offset}",
                    self.msg
                ));
            }
        })
    }

    /// Skips the body of a group started by field `num` (iteratively, so
    /// nesting depth cannot exhaust the stack).
    fn skip_group(&mut self, num: u64, offset: usize) -> Result<(), String> {
        let mut open = vec![num];
        while let Some(&current) = open.last() {
            if self.pos >= self.buf.len() {
                return Err(format!(
                    "protobuf: {}: unterminated group (field {num}) starting at offset {offset}",
                    self.msg
                ));
            }
            let (n, wire, at) = self.tag()?;
            match wire {
                3 => open.push(n),
                4 if n == current => {
                    open.pop();
                }
                4 => {
                    return Err(format!(
                        "protobuf: {}: end-group for field {n} at offset {at} does not match open group {current}",
                        self.msg
                    ));
                }
                wire => {
                    self.payload(wire, n, at)?;
                }
            }
        }
        Ok(())
    }
}

pub(super) fn wrong_wire(f: &Field<'_>, ctx: &str, want: &str) -> String {
    format!(
        "protobuf: {ctx} (field {}) at offset {}: expected wire type {want}, got {}",
        f.num,
        f.offset,
        f.wire.name()
    )
}

impl<'a> Field<'a> {
    /// A length-delimited field holding `payload` (at absolute offset `offset`), for the decoders
    /// that read a message's bytes as a field.
    pub(super) fn len(payload: &'a [u8], offset: usize) -> Self {
        Field {
            num: 0,
            wire: Wire::Len(payload, offset),
            offset,
        }
    }

    pub(super) fn bytes(&self, ctx: &str) -> Result<(&'a [u8], usize), String> {
        match self.wire {
            Wire::Len(b, off) => Ok((b, off)),
            _ => Err(wrong_wire(self, ctx, "2 (length-delimited)")),
        }
    }

    pub(super) fn string(&self, ctx: &str) -> Result<String, String> {
        let (b, off) = self.bytes(ctx)?;
        String::from_utf8(b.to_vec())
            .map_err(|_| format!("protobuf: {ctx} at offset {off}: string is not valid UTF-8"))
    }

    pub(super) fn varint(&self, ctx: &str) -> Result<u64, String> {
        match self.wire {
            Wire::Varint(v) => Ok(v),
            _ => Err(wrong_wire(self, ctx, "0 (varint)")),
        }
    }

    pub(super) fn int64(&self, ctx: &str) -> Result<i64, String> {
        // proto int64: two's complement in a varint.
        self.varint(ctx).map(|v| v as i64)
    }

    pub(super) fn boolean(&self, ctx: &str) -> Result<bool, String> {
        self.varint(ctx).map(|v| v != 0)
    }

    /// A `double`: 64-bit little-endian IEEE 754.
    pub(super) fn double(&self, ctx: &str) -> Result<f64, String> {
        match self.wire {
            Wire::Fixed64(bits) => Ok(f64::from_bits(bits)),
            _ => Err(wrong_wire(self, ctx, "1 (64-bit)")),
        }
    }

    /// The varints of a repeated scalar field: one per field when unpacked (gogo's proto2 default),
    /// all of them in one length-delimited payload when packed (both are valid on the wire).
    pub(super) fn varints(&self, ctx: &'static str) -> Result<Vec<u64>, String> {
        match self.wire {
            Wire::Varint(v) => Ok(vec![v]),
            Wire::Len(payload, offset) => {
                let mut r = Reader::new(payload, offset, ctx);
                let mut values = Vec::new();
                while r.pos < r.buf.len() {
                    values.push(r.varint()?);
                }
                Ok(values)
            }
            _ => Err(wrong_wire(self, ctx, "0 (varint)")),
        }
    }

    /// The doubles of a repeated `double` field, unpacked or packed.
    pub(super) fn doubles(&self, ctx: &'static str) -> Result<Vec<f64>, String> {
        match self.wire {
            Wire::Fixed64(bits) => Ok(vec![f64::from_bits(bits)]),
            Wire::Len(payload, offset) => {
                if payload.len() % 8 != 0 {
                    return Err(format!(
                        "protobuf: {ctx} at offset {offset}: packed doubles of {} bytes",
                        payload.len()
                    ));
                }
                Ok(payload
                    .chunks_exact(8)
                    .map(|c| {
                        let mut le = [0u8; 8];
                        le.copy_from_slice(c);
                        f64::from_bits(u64::from_le_bytes(le))
                    })
                    .collect())
            }
            _ => Err(wrong_wire(self, ctx, "1 (64-bit)")),
        }
    }
}

pub(super) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::super::decode;
    use super::super::test_support::*;

    #[test]
    fn truncation_is_an_error_never_a_panic() {
        for fixture in ALL_FIXTURES {
            // Real bodies end with the raw field followed by empty
            // contentEncoding (1a 00) and contentType (22 00): every cut
            // before that point breaks a length or varint.
            let raw_end = fixture.len() - 4;
            for cut in 0..fixture.len() {
                let r = decode(&fixture[..cut]);
                if cut < raw_end {
                    assert!(r.is_err(), "cut at {cut} decoded: {r:?}");
                }
            }
        }
        let e = err_of(&SECRET_CREATE[..20]);
        assert!(e.contains("exceeds") && e.contains("offset"), "{e}");
    }

    #[test]
    fn corrupted_bytes_never_panic() {
        for fixture in ALL_FIXTURES {
            for i in 0..fixture.len() {
                for v in [0x00, 0x01, 0x07, 0x0b, 0x0c, 0x7f, 0x80, 0xff] {
                    let mut b = fixture.to_vec();
                    b[i] = v;
                    let _ = decode(&b);
                }
            }
        }
    }

    #[test]
    fn malformed_wire_data() {
        // Wrong wire type for a known field.
        let e = err_of(&body("v1", "Secret", Encoder::new().varint(3, 1)));
        assert!(
            e.contains("Secret.type") && e.contains("wire type 2"),
            "{e}"
        );
        let e = err_of(&body("v1", "Secret", Encoder::new().str(5, "yes")));
        assert!(
            e.contains("Secret.immutable") && e.contains("wire type 0"),
            "{e}"
        );
        // Varint longer than 10 bytes / overflowing 64 bits.
        let e = err_of(&with_raw(&[
            0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ]));
        assert!(e.contains("varint"), "{e}");
        let e = err_of(&with_raw(&[
            0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02,
        ]));
        assert!(e.contains("overflows"), "{e}");
        // Truncated varint inside the raw object.
        assert!(err_of(&with_raw(&[0x08, 0x80])).contains("truncated varint"));
        // Length beyond the message.
        let e = err_of(&with_raw(&[0x1a, 0x05, b'a']));
        assert!(e.contains("exceeds"), "{e}");
        // Huge length (would overflow naive arithmetic).
        let e = err_of(&with_raw(&[
            0x1a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ]));
        assert!(e.contains("exceeds"), "{e}");
        // Truncated fixed-width fields.
        assert!(err_of(&with_raw(&[0x31, 1, 2, 3])).contains("truncated"));
        assert!(err_of(&with_raw(&[0x35, 1, 2])).contains("truncated"));
        // Invalid wire types 6 and 7, field number 0.
        assert!(err_of(&with_raw(&[0x0e, 0])).contains("invalid wire type 6"));
        assert!(err_of(&with_raw(&[0x0f, 0])).contains("invalid wire type 7"));
        assert!(err_of(&with_raw(&[0x02, 0])).contains("invalid field number 0"));
        // Groups: stray end, unterminated, mismatched end.
        assert!(err_of(&with_raw(&[0x0c])).contains("unexpected end-group"));
        assert!(err_of(&with_raw(&[0x0b, 0x08, 0x01])).contains("unterminated group"));
        assert!(err_of(&with_raw(&[0x0b, 0x14])).contains("does not match"));
        // Deeply nested groups are skipped without recursion.
        let mut deep = vec![0x7b; 100_000];
        deep.extend(vec![0x7c; 100_000]);
        assert_eq!(decode(&with_raw(&deep)).unwrap()["kind"], "Secret");
        // Invalid UTF-8 in a string field; invalid JSON in FieldsV1.
        let e = err_of(&body("v1", "Secret", Encoder::new().bytes(3, b"\xff")));
        assert!(e.contains("UTF-8") && e.contains("offset"), "{e}");
        let meta = Encoder::new().msg(17, Encoder::new().msg(7, Encoder::new().bytes(1, b"{nope")));
        let e = err_of(&body("v1", "Secret", Encoder::new().msg(1, meta)));
        assert!(e.contains("FieldsV1"), "{e}");
        // Errors carry absolute offsets: the tag of Secret.type inside raw.
        let b = body("v1", "Secret", Encoder::new().varint(3, 1));
        let at = b.len() - 6;
        assert!(
            err_of(&b).contains(&format!("offset {at}")),
            "{}",
            err_of(&b)
        );
    }
}
