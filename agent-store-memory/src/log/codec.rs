//! The byte encoding of a journal record: varints, zigzag for signed offsets, length-prefixed
//! strings, and the [`Reader`] that takes them back.

/// A signed offset as an unsigned number, small for small offsets either way.
pub(super) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// The offset [`zigzag`] encoded.
pub(super) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// `v` in seven-bit groups, low first, the high bit marking that more follow.
pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// `s` as its length and its bytes.
pub(super) fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// Reads back what `EventLog::push` wrote (the journal's own bytes, so never malformed).
pub(super) struct Reader<'a> {
    pub(super) bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(super) fn byte(&mut self) -> u8 {
        let (&b, rest) = self.bytes.split_first().expect("an encoded event is complete");
        self.bytes = rest;
        b
    }

    pub(super) fn varint(&mut self) -> u64 {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let b = self.byte();
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return v;
            }
            shift += 7;
        }
    }

    pub(super) fn str(&mut self) -> &'a str {
        let len = self.varint();
        self.str_of(len)
    }

    /// A string of `len` bytes.
    pub(super) fn str_of(&mut self, len: u64) -> &'a str {
        let len = usize::try_from(len).expect("a length that fit in memory");
        let (s, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        std::str::from_utf8(s).expect("encoded from a str")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_zigzag_round_trip_at_the_edges() {
        for v in [0, 1, -1, i64::MAX, i64::MIN, 1 << 35] {
            let mut out = Vec::new();
            put_varint(&mut out, zigzag(v));
            assert_eq!(unzigzag(Reader { bytes: &out }.varint()), v);
        }
    }
}
