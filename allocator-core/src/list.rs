//! Intrusive doubly-linked lists of metadata descriptors (slabs, page chunks, extents). The
//! links live in the descriptors; a list is a head pointer. Callers hold the lock that guards
//! the list.

/// A descriptor with `next`/`prev` links.
pub trait Linked: Sized {
    fn next(&mut self) -> &mut *mut Self;
    fn prev(&mut self) -> &mut *mut Self;
}

/// Pushes `x` at the front of the list at `head`.
///
/// # Safety
/// `x` is a valid descriptor on no list; every node on the list is valid.
pub unsafe fn push<T: Linked>(head: &mut *mut T, x: *mut T) {
    // SAFETY: per the contract, x and the old head are valid descriptors.
    unsafe {
        *(*x).next() = *head;
        *(*x).prev() = core::ptr::null_mut();
        if !head.is_null() {
            *(**head).prev() = x;
        }
    }
    *head = x;
}

/// Unlinks `x` from the list at `head`.
///
/// # Safety
/// `x` is on this list and every node on it is valid.
pub unsafe fn remove<T: Linked>(head: &mut *mut T, x: *mut T) {
    // SAFETY: per the contract, x and its neighbours are valid descriptors on this list.
    unsafe {
        let next = *(*x).next();
        let prev = *(*x).prev();
        if prev.is_null() {
            debug_assert!(*head == x);
            *head = next;
        } else {
            *(*prev).next() = next;
        }
        if !next.is_null() {
            *(*next).prev() = prev;
        }
        *(*x).next() = core::ptr::null_mut();
        *(*x).prev() = core::ptr::null_mut();
    }
}

/// Implements `Linked` for a descriptor type with `next` and `prev` fields (used beside the
/// type's definition).
macro_rules! linked {
    ($t:ty) => {
        impl $crate::list::Linked for $t {
            fn next(&mut self) -> &mut *mut Self {
                &mut self.next
            }
            fn prev(&mut self) -> &mut *mut Self {
                &mut self.prev
            }
        }
    };
}

pub(crate) use linked;

#[cfg(test)]
mod tests {
    use super::*;

    struct Node {
        next: *mut Node,
        prev: *mut Node,
    }
    linked!(Node);

    #[test]
    fn push_remove() {
        let mut nodes: [Node; 3] = core::array::from_fn(|_| Node {
            next: core::ptr::null_mut(),
            prev: core::ptr::null_mut(),
        });
        let p: [*mut Node; 3] = core::array::from_fn(|i| &mut nodes[i] as *mut Node);
        let mut head = core::ptr::null_mut();
        // SAFETY: the nodes are valid and start on no list.
        unsafe {
            push(&mut head, p[0]);
            push(&mut head, p[1]);
            push(&mut head, p[2]);
            assert_eq!(head, p[2]);
            remove(&mut head, p[1]);
            assert_eq!((*p[2]).next, p[0]);
            assert_eq!((*p[0]).prev, p[2]);
            remove(&mut head, p[2]);
            assert_eq!(head, p[0]);
            remove(&mut head, p[0]);
            assert!(head.is_null());
        }
    }
}
