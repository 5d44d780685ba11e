//! The one integration test binary: the real `bprun` binary, run in temporary repositories.

mod support;
mod tls;

mod apps;
mod bao;
mod bao_sim;
mod charts;
mod cli;
mod deploy;
mod diagnostics;
mod diff;
mod gitlab;
mod gitlab_ci;
mod gitlab_jobs;
mod gitlab_model;
mod gitlab_programs;
mod gitlab_runners;
mod helm_natives;
mod house;
mod in_cluster;
mod kube_natives;
mod kube_realism;
mod kube_sim;
mod natives;
mod params;
mod phase1;
mod phase2;
mod phase3;
mod programs;
mod qualify;
mod recovery;
mod repl;
mod runner;
mod scripts;
mod secrets;
mod stand_in_charts;
