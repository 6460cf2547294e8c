//! The scenarios of `tollgate-bench`, as a library: the program
//! (`src/main.rs`) runs and reports them, and the profiling examples under
//! `examples/` build the very same stacks.

#![warn(missing_docs)]

pub mod chart;
pub mod measure;
pub mod report;
pub mod scenario;
