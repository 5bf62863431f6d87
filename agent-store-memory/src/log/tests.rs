//! The journal's encoding, read back against what was written.

use super::*;

/// A xorshift generator from `state`: the same numbers on every run.
pub(super) fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

fn event(session: &SessionId, seq: u64, id: &str, kind: EventKind) -> Event {
    Event::from_parts(
        EventId::from_string(id),
        seq,
        session.clone(),
        Some(TurnId::from_string("turn-1")),
        ProviderId::new("codex"),
        Timestamp::now(),
        kind,
        Some(RawJson::parsed(format!("{{\"n\":{seq}}}"))),
    )
}

#[test]
fn events_read_back_exactly_as_written() {
    let session = SessionId::new("s").unwrap();
    let mut log = EventLog::new(session.clone());
    let delta = |text: &str| EventKind::MessageDelta { item_id: Some("item-1".into()), text: text.into() };
    let mut written = vec![
        event(&session, 1, "evt_x.1", delta("héllo \"quoted\"")),
        event(&session, 2, "evt_x.2", EventKind::ReasoningDelta { item_id: None, text: String::new().into() }),
        event(&session, 3, "custom-id", delta("b")),
        event(&session, 7, "evt_x.7", EventKind::Warning { message: "gap".into() }),
        event(&session, 8, "evt_x.8", EventKind::CommandOutputDelta { item_id: "cmd".into(), text: "out".into() }),
        // The next run of the session: a prefix of its own.
        event(&session, 9, "evt_y.9", delta("{\"n\":9}")),
        // Dotted, but not this event's seq: a custom ID.
        event(&session, 10, "evt_x.4", delta("c")),
    ];
    written[1].turn_id = None;
    written[1].raw = None;
    written[2].session_id = SessionId::new("other").unwrap();
    written[2].schema_version = 9;
    written[3].at = Timestamp::from_unix_micros(written[0].at.unix_micros() - 5_000_000);
    for event in &written {
        log.push(event);
    }
    let read: Vec<Event> = (0..log.len()).map(|pos| log.get(pos)).collect();
    assert_eq!(read, written);
    assert_eq!(log.last_seq(), Some(10));
    assert_eq!(log.position(7), Some(3));
    assert_eq!(log.position(4), None);
    assert_eq!(log.position_after(3), 3);
    assert_eq!(log.position_after(0), 0);
    assert_eq!(log.position_after(8), 5);
    assert_eq!(log.position_after(9), 6);
    assert_eq!(log.seq_of_id(&EventId::from_string("evt_x.4")), Some(10));
    assert_eq!(log.seq_of_id(&EventId::from_string("evt_y.9")), Some(9));
    assert_eq!(log.seq_of_id(&EventId::from_string("evt_y.8")), None, "seq 8 has another prefix");
    assert_eq!(log.seq_of_id(&EventId::from_string("evt_x.7")), Some(7));
    assert_eq!(log.seq_of_id(&EventId::from_string("custom-id")), Some(3));
    assert_eq!(log.seq_of_id(&EventId::from_string("evt_x.3")), None, "seq 3 has a custom ID");
    assert_eq!(log.seq_of_id(&EventId::from_string("evt_x.07")), None);
    let turn: Vec<u64> = log.turn_positions(&TurnId::from_string("turn-1")).map(|p| log.seq_at(p)).collect();
    assert_eq!(turn, [1, 3, 7, 8, 9, 10]);
    assert_eq!(log.runs, [(0, 1), (3, 7)], "seqs 1-3 and 7-10: two runs");
}

#[test]
fn a_text_cut_from_its_frame_is_kept_as_its_place_and_read_back_as_a_slice() {
    let session = SessionId::new("s").unwrap();
    let mut log = EventLog::new(session.clone());
    // The text "ab" twice in the frame: the place it was cut from is the first.
    let raw = RawJson::parsed(r#"{"delta":"ab","again":"ab"}"#.to_owned());
    let text = raw.share(&raw.get()[10..12]);
    assert!(text.lies_in(raw.get().as_bytes()));
    let mut written = event(&session, 1, "evt_x.1", EventKind::MessageDelta { item_id: None, text });
    written.raw = Some(raw);
    log.push(&written);
    let start = log.chunks[0].len();
    let read = log.get(0);
    assert_eq!(read, written);
    let EventKind::MessageDelta { text, .. } = &read.kind else { panic!("{:?}", read.kind) };
    let frame = read.raw.as_ref().unwrap().get();
    assert!(text.lies_in(frame.as_bytes()), "read back as a slice of the frame");
    assert_eq!(text.as_ptr() as usize - frame.as_ptr() as usize, 10, "at the place it was cut from");
    assert!(start < 2 * frame.len(), "the text is not kept beside the frame ({start} bytes)");
}

/// A Codex-like delta frame around `text`, as the frame and the text cut from it.
fn delta_frame(text: &str, at_ms: u64) -> (RawJson, SharedStr) {
    let raw = RawJson::parsed(format!(
        r#"{{"method":"item/agentMessage/delta","params":{{"threadId":"t-1","itemId":"msg_1","delta":"{text}"}},"emittedAtMs":{at_ms}}}"#
    ));
    let start = raw.get().find(&format!("\"{text}\"")).unwrap() + 1;
    let text = raw.share(&raw.get()[start..start + text.len()]);
    (raw, text)
}

#[test]
fn a_template_whose_text_is_not_in_it_gives_way_to_a_frame_whose_text_is() {
    let session = SessionId::new("s").unwrap();
    let mut log = EventLog::new(session.clone());
    let delta = |seq: u64, raw: RawJson, text: SharedStr| {
        let mut event = event(&session, seq, &format!("evt_x.{seq}"), EventKind::MessageDelta { item_id: None, text });
        event.raw = Some(raw);
        event
    };
    // The first delta was written with an escape: its decoded text is not in its frame.
    let (raw, _) = delta_frame(r"line\n", 1_764_561_234_000);
    let mut written = vec![delta(1, raw, "line\n".into())];
    let text = "forty characters of plain text, no escap";
    for seq in 2..=200u64 {
        // A time that changes after the text, as Codex's `emittedAtMs` does.
        let (raw, shared) = delta_frame(text, 1_764_561_234_000 + seq * 7);
        written.push(delta(seq, raw, shared));
    }
    for event in &written {
        log.push(event);
    }
    for (pos, event) in written.iter().enumerate() {
        assert_eq!(&log.get(pos), event, "event at {pos}");
    }
    // Kept in two parts around the text, each plain delta costs its text and a few bytes;
    // as one difference from the first frame, it would also keep what lies between its
    // text and the time.
    let per_delta = log.chunks.iter().map(Vec::len).sum::<usize>() / written.len();
    assert!(per_delta < text.len() + 24, "{per_delta} bytes per delta");
}

/// A short session holds a small chunk, and once shrunk (closed) only what it wrote; a
/// long one's chunks grow to [`CHUNK`].
#[test]
fn chunks_start_small_grow_and_shrink_when_closed() {
    let session = SessionId::new("s").unwrap();
    let mut log = EventLog::new(session.clone());
    let text = "a delta of a few words";
    let delta = |seq: u64| {
        let (raw, shared) = delta_frame(text, 1_764_561_234_000 + seq);
        let mut event =
            event(&session, seq, &format!("evt_x.{seq}"), EventKind::MessageDelta { item_id: None, text: shared });
        event.raw = Some(raw);
        event
    };
    let written: Vec<Event> = (1..=10_000).map(delta).collect();
    for event in &written[..3] {
        log.push(event);
    }
    assert_eq!(log.chunks.len(), 1);
    assert_eq!(log.chunks[0].capacity(), FIRST_CHUNK, "a short session's first chunk");
    log.shrink();
    assert_eq!(log.chunks[0].capacity(), log.chunks[0].len(), "shrunk to what it holds");
    for event in &written[3..] {
        log.push(event);
    }
    assert!(log.chunks[1..].iter().any(|chunk| chunk.capacity() == CHUNK), "grown to CHUNK");
    for (pos, event) in written.iter().enumerate() {
        assert_eq!(&log.get(pos), event, "event at {pos}");
    }
}

#[test]
fn texts_written_with_any_escapes_read_back_exactly() {
    let session = SessionId::new("s").unwrap();
    let mut log = EventLog::new(session.clone());
    let alphabet = ['a', ' ', '"', '\\', '/', '\n', '\t', '\u{1}', '\u{7f}', 'é', '日', '\u{1f600}'];
    let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
    let (mut written, mut bodies) = (Vec::new(), 0);
    for seq in 1..=2_000u64 {
        let text: String = (0..next() % 12).map(|_| alphabet[(next() % alphabet.len() as u64) as usize]).collect();
        // Each character as JSON must or may write it: as it is, or with a short or a
        // `\u` escape (a surrogate pair beyond the first plane).
        let mut body = String::new();
        for c in text.chars() {
            match (c, next() % 2) {
                ('"', 0) => body.push_str(r#"\""#),
                ('\\', 0) => body.push_str(r"\\"),
                ('/', 0) => body.push_str(r"\/"),
                ('\n', 0) => body.push_str(r"\n"),
                ('\t', 0) => body.push_str(r"\t"),
                ('"' | '\\' | '\n' | '\t' | '\u{1}', _) | (_, 1) => {
                    let mut units = [0; 2];
                    for unit in c.encode_utf16(&mut units) {
                        body.push_str(&format!(r"\u{unit:04X}"));
                    }
                }
                _ => body.push(c),
            }
        }
        assert_eq!(serde_json::from_str::<String>(&format!("\"{body}\"")).unwrap(), text, "{body}");
        bodies += body.len();
        let raw = RawJson::parsed(format!(r#"{{"method":"delta","params":{{"delta":"{body}"}},"n":{seq}}}"#));
        let text = match raw.get().find(&text) {
            Some(start) if body == text && !text.is_empty() => raw.share(&raw.get()[start..start + text.len()]),
            _ => SharedStr::from(text),
        };
        let mut event = event(&session, seq, &format!("evt_x.{seq}"), EventKind::MessageDelta { item_id: None, text });
        event.raw = Some(raw);
        log.push(&event);
        written.push(event);
    }
    for (pos, event) in written.iter().enumerate() {
        assert_eq!(&log.get(pos), event, "event at {pos}");
    }
    // Every text was found in its frame, escaped or not, so none is kept beside it: an event
    // costs the text as written and ~26 bytes of header, lengths and changed digits (~44
    // with the escaped texts kept beside their frames).
    let kept: usize = log.chunks.iter().map(Vec::len).sum();
    assert!(kept < bodies + 32 * written.len(), "{kept} bytes kept for {bodies} bytes of texts as written");
}

#[test]
fn an_escaped_delta_keeps_its_text_once_as_the_string_it_was_written_as() {
    let session = SessionId::new("s").unwrap();
    let mut log = EventLog::new(session.clone());
    // Claude-like frames: the text, then a line ID of its own.
    let bodies = [(r#"say \"hi\"\n"#, "say \"hi\"\n"), ("plain words", "plain words"), (r#"caf\u00e9"#, "café")];
    let mut written = Vec::new();
    for seq in 1..=300u64 {
        let (body, text) = bodies[seq as usize % bodies.len()];
        let mut id =
            format!("{:016x}{:016x}", seq.wrapping_mul(0x9e37_79b9_7f4a_7c15), seq.wrapping_mul(0xc2b2_ae3d_27d4_eb4f));
        if seq == 150 {
            // An escaped frame sharing too little with its template: kept whole, with its
            // text's place, it becomes the template the next frames are split against.
            assert_ne!(body, text);
            id = "x".repeat(400);
        }
        let raw = RawJson::parsed(format!(
            r#"{{"type":"stream_event","event":{{"delta":{{"type":"text_delta","text":"{body}"}}}},"session_id":"00000000-0000-4000-8000-0000000c1a0d","parent_tool_use_id":null,"uuid":"{id}"}}"#
        ));
        // Providers cut a text without escapes from the frame and decode the others.
        let text = match raw.get().find(body) {
            Some(start) if body == text => raw.share(&raw.get()[start..start + body.len()]),
            _ => SharedStr::from(text),
        };
        let mut event = event(&session, seq, &format!("evt_x.{seq}"), EventKind::MessageDelta { item_id: None, text });
        event.raw = Some(raw);
        written.push(event);
    }
    for event in &written {
        log.push(event);
    }
    for (pos, event) in written.iter().enumerate() {
        assert_eq!(&log.get(pos), event, "event at {pos}");
    }
    let template = log.templates[usize::from(MESSAGE_DELTA)].as_ref().unwrap();
    assert_eq!((template.pos, template.text.as_ref().map(|t| t.len())), (149, Some(12)));
    // Each is its text as written, its ID and a few bytes (the first frame, kept whole,
    // spread over all): kept beside its frame's difference, a decoded text would be there
    // twice, and a frame that differs from its template from its text to its end would be
    // kept whole.
    let kept: usize = log.chunks.iter().map(Vec::len).sum();
    let per_delta = kept / written.len();
    assert!(per_delta < 12 + 32 + 24, "{per_delta} bytes per delta");
}

#[test]
fn frames_are_kept_as_their_difference_from_a_template_and_read_back_whole() {
    let session = SessionId::new("s").unwrap();
    let mut log = EventLog::new(session.clone());
    // Texts that start and end with parts of multi-byte characters' neighbours, so the shared
    // ends stop next to them; kinds interleaved, each against its own template.
    let texts = ["héllo", "hèllo", "日本", "日本語", "\u{1f600}x", "\u{1f601}x", "plain", "", "é"];
    let mut written = Vec::new();
    let mut raw_bytes = 0;
    for seq in 1..=300u64 {
        let text = texts[seq as usize % texts.len()];
        let (raw, shared) = delta_frame(text, 1_764_561_234_000 + seq * 7);
        let kind = match seq % 5 {
            0 => EventKind::ReasoningDelta { item_id: None, text: shared },
            1 => EventKind::CommandOutputDelta { item_id: "cmd".into(), text: text.into() },
            2 if seq % 7 == 0 => EventKind::Warning { message: "gap".into() },
            _ => EventKind::MessageDelta { item_id: Some("msg_1".into()), text: shared },
        };
        let mut event = event(&session, seq, &format!("evt_x.{seq}"), kind);
        event.raw = Some(raw);
        if seq % 50 == 0 {
            // A frame that shares nothing with its kind's template: kept whole, the next template.
            event.raw = Some(RawJson::parsed(format!("[{seq}]")));
        }
        raw_bytes += event.raw.as_ref().unwrap().get().len();
        written.push(event);
    }
    for event in &written {
        log.push(event);
    }
    for (pos, event) in written.iter().enumerate() {
        assert_eq!(&log.get(pos), event, "event at {pos}");
    }
    let kept: usize = log.chunks.iter().map(Vec::len).sum();
    assert!(kept * 2 < raw_bytes, "{kept} bytes kept for {raw_bytes} bytes of frames");
}
