//! Where a frame and its template agree: the shared start and end that
//! [`EventLog`](super::EventLog) keeps as lengths instead of bytes.

/// How many bytes `frame` starts and ends with that `template` does too, neither cutting a
/// character of `frame` (nor so of `template`: what comes before a cut is the same in both,
/// and so is whether a character continues past it).
pub(super) fn shared_ends(template: &[u8], frame: &str) -> (usize, usize) {
    let bytes = frame.as_bytes();
    let mut prefix = common_prefix(template, bytes);
    while !frame.is_char_boundary(prefix) {
        prefix -= 1;
    }
    let mut suffix = common_suffix(&template[prefix..], &bytes[prefix..]);
    while !frame.is_char_boundary(bytes.len() - suffix) {
        suffix -= 1;
    }
    (prefix, suffix)
}

/// How many bytes `a` and `b` start with in common, compared eight at a time.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let mut n = 0;
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        let diff = differing_bits(x, y);
        if diff != 0 {
            return n + (diff.trailing_zeros() / 8) as usize;
        }
        n += 8;
    }
    n + a[n..].iter().zip(&b[n..]).take_while(|(x, y)| x == y).count()
}

/// How many bytes `a` and `b` end with in common, compared eight at a time.
fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    let mut n = 0;
    for (x, y) in a.rchunks_exact(8).zip(b.rchunks_exact(8)) {
        let diff = differing_bits(x, y);
        if diff != 0 {
            return n + (diff.leading_zeros() / 8) as usize;
        }
        n += 8;
    }
    let (a, b) = (&a[..a.len() - n], &b[..b.len() - n]);
    n + a.iter().rev().zip(b.iter().rev()).take_while(|(x, y)| x == y).count()
}

/// The bits in which two eight-byte words differ, the first byte lowest.
fn differing_bits(x: &[u8], y: &[u8]) -> u64 {
    u64::from_le_bytes(x.try_into().expect("8 bytes")) ^ u64::from_le_bytes(y.try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_ends_never_cut_a_character_and_rebuild_the_frame() {
        let rebuild = |template: &str, frame: &str| {
            let (prefix, suffix) = shared_ends(template.as_bytes(), frame);
            assert!(prefix + suffix <= frame.len().min(template.len()), "{template:?} {frame:?}");
            format!(
                "{}{}{}",
                &template[..prefix],
                &frame[prefix..frame.len() - suffix],
                &template[template.len() - suffix..]
            )
        };
        assert_eq!(shared_ends("aé".as_bytes(), "aè"), (1, 0), "é and è share their first byte");
        assert_eq!(shared_ends("日".as_bytes(), "\u{6725}"), (0, 0), "the shared last byte continues a character");
        assert_eq!(shared_ends("xé".as_bytes(), "yé"), (0, 2));
        assert_eq!(shared_ends(b"same", "same"), (4, 0));
        assert_eq!(shared_ends(b"", "new"), (0, 0));
        // Pairs of strings from a small alphabet of one- to four-byte characters.
        let alphabet = ['a', 'b', 'é', 'è', '日', '朥', '\u{1f600}', '\u{1f601}'];
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..5_000 {
            let mut word = |n: u64| (0..n).map(|_| alphabet[(next() % 8) as usize]).collect::<String>();
            let (head, tail) = (word(20), word(20));
            let (head, tail) =
                (&head[..head.char_indices().nth(7).unwrap().0], &tail[tail.char_indices().nth(5).unwrap().0..]);
            let (a, b) = (word(3), word(3));
            let (template, frame) = (format!("{head}{a}{tail}"), format!("{head}{b}{tail}"));
            assert_eq!(rebuild(&template, &frame), frame);
            assert_eq!(rebuild(&frame, &template), template);
        }
    }

    #[test]
    fn common_ends_are_counted_past_word_edges() {
        let a = b"0123456789abcdefXYZ";
        for n in 0..a.len() {
            let mut b = a.to_vec();
            b[n] ^= 1;
            assert_eq!(common_prefix(a, &b), n);
            assert_eq!(common_suffix(a, &b), a.len() - 1 - n);
        }
        assert_eq!(common_prefix(b"0123456789", b"01234567"), 8);
        assert_eq!(common_suffix(b"xx0123456789", b"0123456789"), 10);
        assert_eq!(common_suffix(b"", b"abc"), 0);
    }
}
