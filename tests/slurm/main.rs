//! wattson against real Slurm daemons on loopback (tests/harness's lab): the plugins, energy in sacct, sacct's flags, the models' sync, the controller, and the lab itself, and AMD GPUs.
//! One test binary (Cargo.toml: `autotests = false`); each module was a binary of its own.

mod acct_flags;
mod amd;
mod capture;
mod cgroups;
mod configless;
mod cpu_only;
mod ctld;
mod ctld_basic;
mod ctld_budget;
mod ctld_learn;
mod ctld_pace;
mod ctld_share;
mod ctld_types;
mod energy_scope;
mod failover;
mod fan_out;
mod gpu_freq;
mod jobstats;
mod link;
mod mail;
mod micro_update;
mod mig;
mod models_sync;
mod plugins;
mod prolog_epilog;
mod queue_order;
mod releases;
mod second_run;
mod share_opt_in;
mod shared_gpus;
mod slurm;
mod slurm_energy;
mod slurm_lab_selftest;
mod steps;
mod trace_export;
