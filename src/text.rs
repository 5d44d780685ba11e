//! Plain text helpers with no dependency on the rest of the crate: did-you-mean suggestions.

/// The name in `names` closest to `wanted` (at most two edits away), for did-you-mean hints.
pub fn closest(wanted: &str, names: &[String]) -> Option<String> {
    let mut best: Option<(usize, &String)> = None;
    for name in names {
        let distance = edit_distance(wanted, name);
        if distance <= 2 && name != wanted && best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, name));
        }
    }
    best.map(|(_, name)| name.clone())
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let current = row[j + 1];
            row[j + 1] = (previous + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(current + 1);
            previous = current;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("write_txt", "write_text"), 1);
        assert_eq!(edit_distance("abc", "abc"), 0);
    }

    #[test]
    fn the_closest_name_is_at_most_two_edits_away_and_not_the_name_itself() {
        let names = vec!["write_text".to_string(), "read_text".to_string()];
        assert_eq!(closest("write_txt", &names).as_deref(), Some("write_text"));
        assert_eq!(closest("write_text", &names), None);
        assert_eq!(closest("delete", &names), None);
    }
}
