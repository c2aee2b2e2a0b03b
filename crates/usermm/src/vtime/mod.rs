//! Virtual time (DESIGN.md §8): cost profiles so far; the runtime follows.

#![deny(unsafe_code)]

mod profile;

pub use profile::{
    Cost, Distance, Figure, LockFigure, Placement, Profile, ProfileError, ProfileSpec, Smt,
    Topology, Transfers, ENGINE_LOCK_CLASSES,
};
