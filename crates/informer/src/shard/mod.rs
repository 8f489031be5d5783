//! The slice of the hash space a sharded replica caches and serves, as far as the informers
//! need it: hash ranges, the gate that admits keys, the server-side shard selector. Membership
//! (who serves which range) is the host's `shard` module, above.

mod gate;
pub mod range;
pub mod selector;

pub use gate::{Admission, ListedRange, ShardGate};
pub use range::{HashRange, fnv1a64, key_hash, split};
