//! The doctor's checks, each a pure function of what was read from the
//! cluster and nodegate's settings: no I/O, no clock (the time is passed in).

pub mod admission;
pub mod autoscaler;
pub mod karpenter;
pub mod leader;
pub mod nodes;
pub mod rbac;

#[cfg(test)]
mod tests;
