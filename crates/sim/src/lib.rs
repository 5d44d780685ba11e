//! bprun's simulators, shipped in the binary (`bprun sim ...`) for tests, benchmarks and the rehearsal:
//! systems that cannot run on the build machines, behaving as their documentation and real
//! clients show.

pub mod bao;
pub mod git;
pub mod gitlab;
pub mod http;
pub mod images;
pub mod kube;
pub mod netns;
pub mod network;
pub mod platform;
pub mod sandbox;
pub mod tools;
