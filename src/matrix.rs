//! Sweep axes -> points: cartesian product with include/exclude entries. Pure.
