//! Where the messages of a gRPC body begin.
//!
//! A gRPC body is a sequence of length-prefixed messages: one flag byte
//! (0: not compressed, 1: compressed), a 4-byte big-endian length, then
//! that many bytes. HTTP/2 cuts the body into chunks anywhere: a chunk can
//! hold several messages, the end of one and the start of the next, or a
//! piece of a header. [`Framer`] reads the chunks in order, keeping where
//! it is across them, and stops on the first byte of each message — so a
//! message is found once, on its flag byte, however its bytes are cut.

/// Reads a gRPC body's framing chunk by chunk; see the module docs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Framer {
    state: State,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum State {
    /// The next byte is a flag byte: a message (or a gRPC-Web trailers
    /// frame) begins.
    #[default]
    Boundary,
    /// Inside a length prefix: `read` of its 4 bytes so far, their value
    /// in `len`.
    Length { read: u8, len: u32 },
    /// Inside a payload: `left` bytes to go.
    Payload { left: u32 },
    /// A flag byte that gRPC does not define: the body is not gRPC
    /// framing (or not any more), and nothing after it is a message.
    Broken,
}

/// What [`Framer::feed`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fed {
    /// How many bytes it read.
    pub read: usize,
    /// Whether the last byte read is the flag byte of a message: it stops
    /// there, so that the caller can decide about the message before it
    /// forwards that byte.
    pub message: bool,
}

impl Framer {
    /// Reads `bytes`, the next bytes of the body, up to and including the
    /// flag byte of the next message, or all of them if no message begins
    /// in them.
    ///
    /// A flag byte with the high bit set (`0x80`, `0x81`) begins a
    /// gRPC-Web trailers frame, skipped as a frame but not a message. Any
    /// other flag but 0 and 1 is not gRPC: the framer stops counting, and
    /// the rest of the body is passed through unread (tonic answers such a
    /// body with `INTERNAL` on its own). A length is at most `u32::MAX`
    /// and is only ever counted down, so no input can overflow.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Fed {
        let mut at = 0;
        while at < bytes.len() {
            match self.state {
                State::Boundary => {
                    let flag = bytes[at];
                    at += 1;
                    let message = match flag {
                        0 | 1 => true,
                        0x80 | 0x81 => false,
                        _ => {
                            self.state = State::Broken;
                            return Fed {
                                read: at,
                                message: false,
                            };
                        }
                    };
                    self.state = State::Length { read: 0, len: 0 };
                    if message {
                        return Fed { read: at, message };
                    }
                }
                State::Length { mut read, mut len } => {
                    while read < 4 && at < bytes.len() {
                        len = len << 8 | u32::from(bytes[at]);
                        read += 1;
                        at += 1;
                    }
                    self.state = match (read, len) {
                        (4, 0) => State::Boundary,
                        (4, left) => State::Payload { left },
                        _ => State::Length { read, len },
                    };
                }
                State::Payload { left } => {
                    let available = bytes.len() - at;
                    // `left` fits a u32, so the step does too.
                    let step = usize::try_from(left).map_or(available, |l| l.min(available));
                    at += step;
                    let left = left - u32::try_from(step).unwrap_or(left);
                    self.state = if left == 0 {
                        State::Boundary
                    } else {
                        State::Payload { left }
                    };
                }
                State::Broken => at = bytes.len(),
            }
        }
        Fed {
            read: at,
            message: false,
        }
    }

    /// Whether the framer is between messages (or past the point where the
    /// body stopped being gRPC): a body that ends anywhere else ends
    /// inside a message.
    #[cfg(test)]
    pub(crate) fn at_boundary(&self) -> bool {
        matches!(self.state, State::Boundary | State::Broken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A message of `len` bytes, framed, with flag `flag`.
    fn framed(flag: u8, len: usize) -> Vec<u8> {
        let mut out = vec![flag];
        out.extend_from_slice(&u32::try_from(len).unwrap().to_be_bytes());
        out.extend(std::iter::repeat_n(0xAB, len));
        out
    }

    /// The messages the framer finds in `body` cut at `cuts`, and where
    /// (the offset of each message's flag byte in the whole body).
    fn starts(body: &[u8], cuts: &[usize]) -> Vec<usize> {
        let mut framer = Framer::default();
        let mut found = Vec::new();
        let mut from = 0;
        let mut bounds: Vec<usize> = cuts.iter().copied().filter(|&c| c < body.len()).collect();
        bounds.sort_unstable();
        bounds.push(body.len());
        for end in bounds {
            let mut chunk = &body[from..end];
            let mut offset = from;
            while !chunk.is_empty() {
                let fed = framer.feed(chunk);
                assert!(fed.read > 0 && fed.read <= chunk.len());
                if fed.message {
                    found.push(offset + fed.read - 1);
                }
                offset += fed.read;
                chunk = &chunk[fed.read..];
            }
            from = end;
        }
        found
    }

    #[test]
    fn several_messages_in_one_chunk_are_found_one_by_one() {
        let mut body = framed(0, 3);
        body.extend(framed(1, 0));
        body.extend(framed(0, 2));
        assert_eq!(starts(&body, &[]), [0, 8, 13]);
    }

    #[test]
    fn a_header_cut_anywhere_is_one_message() {
        let mut body = framed(0, 300);
        body.extend(framed(0, 1));
        for cut in 1..7 {
            assert_eq!(starts(&body, &[cut]), [0, 305], "cut at {cut}");
        }
        // Every byte its own chunk.
        let all: Vec<usize> = (1..body.len()).collect();
        assert_eq!(starts(&body, &all), [0, 305]);
    }

    #[test]
    fn the_largest_length_does_not_overflow() {
        let mut framer = Framer::default();
        let fed = framer.feed(&[0, 0xFF, 0xFF, 0xFF, 0xFF, 1, 2, 3]);
        assert_eq!(
            fed,
            Fed {
                read: 1,
                message: true
            }
        );
        assert_eq!(framer.feed(&[0xFF, 0xFF, 0xFF, 0xFF, 1, 2, 3]).read, 7);
        assert_eq!(framer.state, State::Payload { left: u32::MAX - 3 });
        assert!(!framer.at_boundary());
    }

    #[test]
    fn grpc_web_trailers_frames_are_not_messages() {
        let mut body = framed(0, 2);
        body.extend(framed(0x80, 10));
        assert_eq!(starts(&body, &[]), [0]);
    }

    #[test]
    fn garbage_stops_the_count_without_a_panic() {
        let mut body = framed(0, 1);
        body.push(7); // not a flag
        body.extend(framed(0, 1));
        assert_eq!(starts(&body, &[]), [0]);
        let mut framer = Framer::default();
        let mut rest = &body[..];
        while !rest.is_empty() {
            rest = &rest[framer.feed(rest).read..];
        }
        assert_eq!(framer.state, State::Broken);
        assert!(framer.at_boundary());
    }

    proptest! {
        /// Random messages, cut at random points: every message is found
        /// exactly once, on its flag byte, whatever the cuts.
        #[test]
        fn random_messages_cut_anywhere_count_exactly(
            lens in proptest::collection::vec(0usize..40, 0..20),
            flags in proptest::collection::vec(0u8..2, 20),
            cuts in proptest::collection::vec(0usize..1000, 0..30),
        ) {
            let mut body = Vec::new();
            let mut expected = Vec::new();
            for (len, flag) in lens.iter().zip(&flags) {
                expected.push(body.len());
                body.extend(framed(*flag, *len));
            }
            prop_assert_eq!(starts(&body, &cuts), expected);
        }

        /// Any bytes at all, cut anywhere: no panic, and each call reads
        /// at least one byte.
        #[test]
        fn any_bytes_never_panic(
            body in proptest::collection::vec(any::<u8>(), 0..200),
            cuts in proptest::collection::vec(0usize..200, 0..10),
        ) {
            let _ = starts(&body, &cuts);
        }
    }
}
