//! hugealloc: a general-purpose memory allocator with first-class control of Linux
//! transparent huge pages. See `docs/architecture.md` for the layers and the paths a pointer
//! takes; modules are listed here bottom-up, and each uses only modules listed before it.
#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(any(test, loom))]
extern crate std;

pub mod os;
pub mod diag;
pub mod sync;
pub mod bits;
pub mod bitmap;
pub mod size_class;
pub mod thp;
pub mod config;
