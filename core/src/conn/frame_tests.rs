//! Frames written by `frame::write_frame` read back by the runtime's
//! reader (`read_stream` over a socket pair): round trips, truncated and
//! hostile frames, the payload limit.

use super::{frame_bytes, read_stream};
use crate::frame::FrameError;
use crate::limits::MAX_PAYLOAD_LEN;
use crate::wire::Kind;

#[test]
fn multipart_round_trip_and_back_to_back() {
    let mut bytes = frame_bytes(Kind::Message, &[b"hello", b"", b"world!"]);
    bytes.extend(frame_bytes(Kind::Message, &[]));
    let (frames, end) = read_stream(&bytes, MAX_PAYLOAD_LEN);
    assert!(matches!(end, FrameError::Closed), "{end}");
    assert_eq!(frames.len(), 2);
    assert_eq!(frames[0].envelope.actor, "a");
    assert_eq!(
        frames[0].parts,
        vec![b"hello".to_vec(), vec![], b"world!".to_vec()]
    );
    assert!(frames[1].parts.is_empty());
}

#[test]
fn truncated_and_hostile_frames_are_errors() {
    let bytes = frame_bytes(Kind::Message, &[b"hello"]);
    for cut in 1..bytes.len() {
        let (frames, _) = read_stream(&bytes[..cut], MAX_PAYLOAD_LEN);
        assert!(frames.is_empty(), "cut at {cut} accepted");
    }
    let huge = (u32::MAX).to_le_bytes().to_vec();
    assert!(matches!(
        read_stream(&huge, MAX_PAYLOAD_LEN).1,
        FrameError::HeaderTooLarge(_)
    ));
    let mut junk = 8u32.to_le_bytes().to_vec();
    junk.extend([0xffu8; 8]);
    assert!(matches!(
        read_stream(&junk, MAX_PAYLOAD_LEN).1,
        FrameError::Decode(_)
    ));
}

#[test]
fn a_payload_over_the_limit_is_refused_with_its_size_and_the_setting() {
    let bytes = frame_bytes(Kind::Message, &[b"hello", b"world"]);
    let (frames, end) = read_stream(&bytes, 9);
    assert!(frames.is_empty());
    assert!(
        matches!(
            end,
            FrameError::PayloadTooLarge {
                declared: 10,
                limit: 9
            }
        ),
        "{end}"
    );
    let text = end.to_string();
    assert!(
        text.contains(crate::limits::MAX_FRAME_PAYLOAD_VAR),
        "{text}"
    );
    assert_eq!(read_stream(&bytes, 10).0.len(), 1);
}
