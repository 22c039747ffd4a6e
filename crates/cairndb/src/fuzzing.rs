//! Entry points for the fuzz targets in `fuzz/` and their regression tests.
//! Not part of the stable API.
