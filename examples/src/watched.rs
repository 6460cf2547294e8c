//! The playground follows its files (the limits, quota and access files)
//! with the library's watcher, [`tollgate::watched`]: a change is put in
//! force only once the file is whole and stable, never half-written,
//! never emptied by accident.

pub use tollgate::watched::*;
