//! The wire format: envelopes, shapes and mesh references as flatbuffers of
//! `core/schema/monarch.fbs`, decoded into owned Rust values after
//! verification, so nothing a peer sends can make us read out of bounds.

use std::sync::Arc;

use flatbuffers::FlatBufferBuilder;

use crate::geometry::Shape;

#[allow(clippy::all, unused_imports, dead_code, mismatched_lifetime_syntaxes)]
#[rustfmt::skip]
#[path = "generated/monarch_generated.rs"]
#[allow(missing_docs)]
mod generated;

pub use fb::Kind;
pub(crate) use generated::monarch::schema as fb;

/// An error decoding bytes that claim to be one of our flatbuffers.
#[derive(Debug, thiserror::Error)]
#[error("malformed {what}: {detail}")]
pub struct DecodeError {
    /// Which flatbuffer was malformed.
    pub what: &'static str,
    /// What was wrong with it.
    pub detail: String,
}

fn bad(what: &'static str, detail: impl ToString) -> DecodeError {
    DecodeError {
        what,
        detail: detail.to_string(),
    }
}

/// The decoded header of one frame.
#[derive(Debug, Clone, Default)]
pub struct Envelope {
    /// What the frame is.
    pub kind: Kind,
    /// Address of the sending proc.
    pub sender: String,
    /// Key of the destination actor in the receiving proc.
    pub actor: String,
    /// The endpoint (Message) or request (to a host agent).
    pub method: String,
    /// The actor type to construct (SpawnActor).
    pub type_name: String,
    /// The port of the sender that takes the answer (0: no answer).
    pub reply_port: u64,
    /// The slot of that port this answer fills.
    pub reply_slot: u64,
    /// Rank of the receiving actor in the mesh the message was sent to.
    pub message_rank: u64,
    /// Encoded `Shape` flatbuffer of the mesh the message was sent to.
    pub shape: Option<Arc<[u8]>>,
    /// A Reply that carries an error.
    pub is_error: bool,
    /// The error message of an error Reply.
    pub error: String,
    /// The length of each payload part.
    pub part_sizes: Vec<u64>,
    /// Multicast subtree (see `multicast`): base ranks, addresses and slots
    /// (`multicast::FORWARD_ONLY`: forward only) of the nodes, receiver
    /// first. A cast's last hop carries its own rank and slot only.
    pub cast_ranks: Vec<u64>,
    /// Addresses of the multicast subtree's nodes.
    pub cast_addrs: Vec<String>,
    /// Reply slots of the multicast subtree's nodes.
    pub cast_slots: Vec<u64>,
    /// Fan-out of the multicast tree.
    pub cast_fanout: u32,
    /// Where replies go when not to `sender`.
    pub reply_to: String,
    /// Forwarding procs collect their subtree's replies (see `multicast`).
    pub cast_relay: bool,
    /// Id of the proc mesh's address table (see `multicast`; 0: none).
    pub cast_table: u64,
    /// A cast carrying the view: the number of procs of the proc mesh (0:
    /// the cast carries node lists).
    pub cast_n: u64,
}

impl Envelope {
    /// An envelope of `kind` with every other field empty.
    pub fn new(kind: Kind) -> Envelope {
        Envelope {
            kind,
            ..Default::default()
        }
    }

    /// Whether this is part of a cast (it carries multicast fields): a
    /// proc that forwarded it may have sent it on behalf of `sender`.
    pub fn is_relayed(&self) -> bool {
        !self.cast_ranks.is_empty()
    }

    /// Encode into `fbb` (which is reset first) and return the bytes.
    pub fn encode<'a>(&self, fbb: &'a mut FlatBufferBuilder<'static>) -> &'a [u8] {
        self.encode_for(fbb, None, None)
    }

    /// `encode`, with `sender` (when given and ours is empty) and the part
    /// sizes of `parts` (when given) in place of the envelope's own, so the
    /// send path need not clone the envelope to fill them in.
    pub(crate) fn encode_for<'a>(
        &self,
        fbb: &'a mut FlatBufferBuilder<'static>,
        sender: Option<&str>,
        parts: Option<&[&[u8]]>,
    ) -> &'a [u8] {
        fbb.reset();
        let opt_str = |fbb: &mut FlatBufferBuilder<'static>, s: &str| {
            if s.is_empty() {
                None
            } else {
                Some(fbb.create_string(s))
            }
        };
        let sender = match sender {
            // A reply's sender is never read (the port id says what it
            // answers): leave it out rather than encode and verify it.
            Some(s) if self.sender.is_empty() && self.kind != Kind::Reply => opt_str(fbb, s),
            _ => opt_str(fbb, &self.sender),
        };
        let actor = opt_str(fbb, &self.actor);
        let method = opt_str(fbb, &self.method);
        let type_name = opt_str(fbb, &self.type_name);
        let error = opt_str(fbb, &self.error);
        let shape = self.shape.as_ref().map(|s| fbb.create_vector(s));
        let part_sizes = match parts {
            Some([]) => None,
            Some(parts) => Some(fbb.create_vector_from_iter(parts.iter().map(|p| p.len() as u64))),
            None if self.part_sizes.is_empty() => None,
            None => Some(fbb.create_vector(&self.part_sizes)),
        };
        let reply_to = opt_str(fbb, &self.reply_to);
        let (cast_ranks, cast_addrs, cast_slots) = if self.cast_ranks.is_empty() {
            (None, None, None)
        } else {
            let addrs: Vec<_> = self
                .cast_addrs
                .iter()
                .map(|a| fbb.create_string(a))
                .collect();
            (
                Some(fbb.create_vector(&self.cast_ranks)),
                Some(fbb.create_vector(&addrs)),
                Some(fbb.create_vector(&self.cast_slots)),
            )
        };
        let root = fb::Envelope::create(
            fbb,
            &fb::EnvelopeArgs {
                kind: self.kind,
                sender,
                token: None,
                actor,
                method,
                type_name,
                reply_port: self.reply_port,
                reply_slot: self.reply_slot,
                message_rank: self.message_rank,
                shape,
                is_error: self.is_error,
                error,
                part_sizes,
                cast_ranks,
                cast_addrs,
                cast_slots,
                cast_fanout: self.cast_fanout,
                reply_to,
                cast_relay: self.cast_relay,
                cast_table: self.cast_table,
                cast_n: self.cast_n,
            },
        );
        fbb.finish_minimal(root);
        fbb.finished_data()
    }

    /// Verify and decode a header.
    pub fn decode(buf: &[u8]) -> Result<Envelope, DecodeError> {
        Envelope::decode_cached(buf, &mut None)
    }

    /// `decode`, reusing `last_shape` when the nested shape is byte-equal to
    /// it (a stream of calls to one mesh repeats the same shape, and this
    /// saves verifying and copying it per message); updates `last_shape`.
    pub(crate) fn decode_cached(
        buf: &[u8],
        last_shape: &mut Option<Arc<[u8]>>,
    ) -> Result<Envelope, DecodeError> {
        let e = fb::root_as_envelope(buf).map_err(|e| bad("envelope", e))?;
        let s = |v: Option<&str>| v.unwrap_or_default().to_string();
        let shape = match e.shape() {
            Some(v) => match last_shape {
                // Verified when it was cached.
                Some(last) if **last == *v.bytes() => Some(last.clone()),
                _ => {
                    // Verify the nested shape now, so later readers can trust it.
                    flatbuffers::root::<fb::Shape>(v.bytes()).map_err(|e| bad("shape", e))?;
                    let shape: Arc<[u8]> = Arc::from(v.bytes());
                    *last_shape = Some(shape.clone());
                    Some(shape)
                }
            },
            None => None,
        };
        Ok(Envelope {
            kind: e.kind(),
            sender: s(e.sender()),
            actor: s(e.actor()),
            method: s(e.method()),
            type_name: s(e.type_name()),
            reply_port: e.reply_port(),
            reply_slot: e.reply_slot(),
            message_rank: e.message_rank(),
            shape,
            is_error: e.is_error(),
            error: s(e.error()),
            part_sizes: e
                .part_sizes()
                .map(|v| v.iter().collect())
                .unwrap_or_default(),
            cast_ranks: e
                .cast_ranks()
                .map(|v| v.iter().collect())
                .unwrap_or_default(),
            cast_addrs: e
                .cast_addrs()
                .map(|v| v.iter().map(|a| a.to_string()).collect())
                .unwrap_or_default(),
            cast_slots: e
                .cast_slots()
                .map(|v| v.iter().collect())
                .unwrap_or_default(),
            cast_fanout: e.cast_fanout(),
            reply_to: s(e.reply_to()),
            cast_relay: e.cast_relay(),
            cast_table: e.cast_table(),
            cast_n: e.cast_n(),
        })
    }
}

fn build_shape<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    shape: &Shape,
) -> flatbuffers::WIPOffset<fb::Shape<'a>> {
    let labels: Vec<_> = shape
        .labels()
        .iter()
        .map(|l| fbb.create_string(l))
        .collect();
    let labels = fbb.create_vector(&labels);
    let sizes: Vec<u64> = shape.sizes().iter().map(|&s| s as u64).collect();
    let sizes = fbb.create_vector(&sizes);
    let strides: Vec<u64> = shape.strides().iter().map(|&s| s as u64).collect();
    let strides = fbb.create_vector(&strides);
    fb::Shape::create(
        fbb,
        &fb::ShapeArgs {
            labels: Some(labels),
            offset: shape.offset() as u64,
            sizes: Some(sizes),
            strides: Some(strides),
        },
    )
}

fn read_shape(s: fb::Shape<'_>) -> Result<Shape, DecodeError> {
    let labels: Vec<String> = s
        .labels()
        .map(|v| v.iter().map(|l| l.to_string()).collect())
        .unwrap_or_default();
    let conv = |v: Option<flatbuffers::Vector<'_, u64>>| -> Result<Vec<usize>, DecodeError> {
        v.map(|v| {
            v.iter()
                .map(|x| usize::try_from(x).map_err(|e| bad("shape", e)))
                .collect()
        })
        .unwrap_or(Ok(Vec::new()))
    };
    let offset = usize::try_from(s.offset()).map_err(|e| bad("shape", e))?;
    Shape::from_parts(labels, offset, conv(s.sizes())?, conv(s.strides())?)
        .map_err(|e| bad("shape", e))
}

/// Encode a shape as a standalone `Shape` flatbuffer.
pub fn encode_shape(shape: &Shape) -> Vec<u8> {
    let mut fbb = FlatBufferBuilder::new();
    let root = build_shape(&mut fbb, shape);
    fbb.finish_minimal(root);
    fbb.finished_data().to_vec()
}

/// Verify and decode a standalone `Shape` flatbuffer.
pub(crate) fn decode_shape(buf: &[u8]) -> Result<Shape, DecodeError> {
    let s = flatbuffers::root::<fb::Shape>(buf).map_err(|e| bad("shape", e))?;
    read_shape(s)
}

/// A reference to (a view of) an actor mesh, as carried in messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActorMeshRef {
    /// The mesh's name.
    pub name: String,
    /// The actor key under which its actors live in their procs.
    pub key: String,
    /// The address of the proc at each base rank.
    pub procs: Vec<String>,
    /// The view.
    pub shape: Shape,
}

impl ActorMeshRef {
    /// Encode as an `ActorMeshRef` flatbuffer.
    pub fn encode(&self) -> Vec<u8> {
        let mut fbb = FlatBufferBuilder::new();
        let name = fbb.create_string(&self.name);
        let key = fbb.create_string(&self.key);
        let procs: Vec<_> = self.procs.iter().map(|p| fbb.create_string(p)).collect();
        let procs = fbb.create_vector(&procs);
        let shape = build_shape(&mut fbb, &self.shape);
        let root = fb::ActorMeshRef::create(
            &mut fbb,
            &fb::ActorMeshRefArgs {
                name: Some(name),
                key: Some(key),
                procs: Some(procs),
                shape: Some(shape),
            },
        );
        fbb.finish_minimal(root);
        fbb.finished_data().to_vec()
    }

    /// Decode an `ActorMeshRef` flatbuffer (verified first).
    pub fn decode(buf: &[u8]) -> Result<ActorMeshRef, DecodeError> {
        let r = flatbuffers::root::<fb::ActorMeshRef>(buf).map_err(|e| bad("actor mesh ref", e))?;
        let shape = read_shape(r.shape().ok_or_else(|| bad("actor mesh ref", "no shape"))?)?;
        let procs: Vec<String> = r
            .procs()
            .map(|v| v.iter().map(|p| p.to_string()).collect())
            .unwrap_or_default();
        if let Some(max) = shape.max_base_rank() {
            if max >= procs.len() {
                return Err(bad("actor mesh ref", "shape reaches past its procs"));
            }
        }
        Ok(ActorMeshRef {
            name: r.name().unwrap_or_default().to_string(),
            key: r.key().unwrap_or_default().to_string(),
            procs,
            shape,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_survive_the_wire() {
        // A reference to a view (e.g. a pickled sliced mesh) keeps the view.
        let hg = || Shape::new(&[("hosts", 2), ("gpus", 4)]).unwrap();
        let views = [
            hg().select("gpus", Some(1), None, 2).unwrap(),
            hg().at("hosts", 1).unwrap().flatten("x").unwrap(),
            hg().split("gpus", &[("a", None), ("b", Some(2))])
                .unwrap()
                .rename(&[("hosts", "dp")])
                .unwrap()
                .at("b", 1)
                .unwrap(),
        ];
        for v in views {
            let back = decode_shape(&encode_shape(&v)).unwrap();
            assert_eq!(back, v);
            assert_eq!(
                back.base_ranks().collect::<Vec<_>>(),
                v.base_ranks().collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn envelope_round_trip() {
        let shape = Shape::new(&[("gpus", 4)]).unwrap();
        let mut e = Envelope::new(Kind::Message);
        e.sender = "unix:/x".into();
        e.actor = "counters.1".into();
        e.method = "incr".into();
        e.reply_port = 7;
        e.reply_slot = 3;
        e.message_rank = 3;
        e.shape = Some(encode_shape(&shape).into());
        e.part_sizes = vec![5, 0, 9];
        let mut fbb = FlatBufferBuilder::new();
        let bytes = e.encode(&mut fbb).to_vec();
        let d = Envelope::decode(&bytes).unwrap();
        assert_eq!(d.kind, Kind::Message);
        assert_eq!(d.actor, "counters.1");
        assert_eq!(d.method, "incr");
        assert_eq!((d.reply_port, d.reply_slot, d.message_rank), (7, 3, 3));
        assert_eq!(d.part_sizes, vec![5, 0, 9]);
        assert_eq!(decode_shape(d.shape.as_ref().unwrap()).unwrap(), shape);
    }

    #[test]
    fn repeated_shape_is_shared_and_a_new_one_still_verified() {
        let mut fbb = FlatBufferBuilder::new();
        let with_shape = |fbb: &mut FlatBufferBuilder<'static>, shape: Vec<u8>| {
            let mut e = Envelope::new(Kind::Message);
            e.shape = Some(shape.into());
            e.encode(fbb).to_vec()
        };
        let a = encode_shape(&Shape::new(&[("gpus", 4)]).unwrap());
        let b = encode_shape(&Shape::new(&[("hosts", 2)]).unwrap());
        let mut cache = None;
        let d1 = Envelope::decode_cached(&with_shape(&mut fbb, a.clone()), &mut cache).unwrap();
        let d2 = Envelope::decode_cached(&with_shape(&mut fbb, a.clone()), &mut cache).unwrap();
        assert!(Arc::ptr_eq(
            d1.shape.as_ref().unwrap(),
            d2.shape.as_ref().unwrap()
        ));
        let d3 = Envelope::decode_cached(&with_shape(&mut fbb, b.clone()), &mut cache).unwrap();
        assert_eq!(&**d3.shape.as_ref().unwrap(), &b[..]);
        // A malformed nested shape is refused even right after a good one.
        let bad_bytes = vec![0xffu8; 12];
        assert!(Envelope::decode_cached(&with_shape(&mut fbb, bad_bytes), &mut cache).is_err());
        assert_eq!(&**cache.as_ref().unwrap(), &b[..]);
    }

    #[test]
    fn garbage_is_rejected_not_panicking() {
        for n in 0..64 {
            let junk: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
            let _ = Envelope::decode(&junk);
            let _ = decode_shape(&junk);
            let _ = ActorMeshRef::decode(&junk);
        }
        assert!(Envelope::decode(&[1, 2, 3]).is_err());
    }

    #[test]
    fn mesh_ref_round_trip_and_bounds() {
        let shape = Shape::new(&[("gpus", 2)]).unwrap().at("gpus", 1).unwrap();
        let r = ActorMeshRef {
            name: "c".into(),
            key: "c.1".into(),
            procs: vec!["unix:/a".into(), "unix:/b".into()],
            shape,
        };
        assert_eq!(ActorMeshRef::decode(&r.encode()).unwrap(), r);
        let mut short = r.clone();
        short.procs.pop();
        assert!(ActorMeshRef::decode(&short.encode()).is_err());
    }
}
