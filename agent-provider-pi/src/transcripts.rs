//! Parser tests over the captured pi transcripts (see below).
