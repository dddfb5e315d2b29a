//! A fork while another thread runs the global init, past the fork handlers' registration:
//! the prepare handler waits for the init, so the child finds it done. Alone in its binary
//! (the init runs once per process).

mod common;
mod forking;

#[test]
fn fork_while_the_init_runs() {
    forking::fork_during_init(hugealloc::testing::init::InitStep::ForkHandlers);
}
