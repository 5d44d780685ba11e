//! Plain text helpers with no dependency on the rest of the crate: did-you-mean suggestions and
//! counted nouns.

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

/// `1 step`, `2 steps`: a count and its noun (nouns whose plural adds an `s`).
pub fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
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

/// `rows` (the first one a header) as left-aligned columns `gap` apart, each as wide as its
/// widest cell; trailing spaces trimmed.
pub fn aligned(rows: &[Vec<String>], gap: &str) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|column| {
            rows.iter()
                .filter_map(|row| row.get(column))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.iter()
        .map(|row| {
            row.iter()
                .zip(&widths)
                .map(|(cell, width)| format!("{cell:<width$}"))
                .collect::<Vec<_>>()
                .join(gap)
                .trim_end()
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_of_one_is_singular() {
        assert_eq!(count(1, "step"), "1 step");
        assert_eq!(count(0, "check"), "0 checks");
        assert_eq!(count(3, "share"), "3 shares");
    }

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
