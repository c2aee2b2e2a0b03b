//! (placeholder; the sync facade is being written)
