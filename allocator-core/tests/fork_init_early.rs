//! A fork while another thread has just started the global init, before the fork handlers
//! exist: the child finds the init abandoned by a thread it does not have, and runs it itself.
//! Alone in its binary (the init runs once per process).

mod common;
mod forking;

#[test]
fn fork_before_the_init_registered_its_handlers() {
    forking::fork_during_init(hugealloc::testing::init::InitStep::Start);
}
