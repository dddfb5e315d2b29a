//! `cfrac`: many tiny, short-lived objects, after the cfrac benchmark (factoring with
//! continued fractions over small bignums). For `SIZE` values of D (cycling through the
//! non-squares up to 4,000) it expands sqrt(D) as a continued fraction over one period and
//! carries the convergents p/q as bignums (`Vec<u32>` limbs, 4 to ~60 bytes). Every arithmetic
//! step allocates its result and drops an operand, so nearly every object lives for a few
//! steps. At the end of each period it checks Pell's equation, p^2 - D q^2 = (-1)^period:
//! a corrupted limb anywhere in the chain breaks it.

use super::common::finish;
use crate::args::Args;
use crate::measure::Mark;

/// A non-negative bignum, little-endian 32-bit limbs, no trailing zero limbs (zero is empty).
type Big = Vec<u32>;

fn trim(mut v: Big) -> Big {
    while v.last() == Some(&0) {
        v.pop();
    }
    v
}

fn add(a: &[u32], b: &[u32]) -> Big {
    let (a, b) = if a.len() >= b.len() { (a, b) } else { (b, a) };
    let mut out = Vec::with_capacity(a.len() + 1);
    let mut carry = 0u64;
    for (i, &x) in a.iter().enumerate() {
        let s = x as u64 + *b.get(i).unwrap_or(&0) as u64 + carry;
        out.push(s as u32);
        carry = s >> 32;
    }
    if carry > 0 {
        out.push(carry as u32);
    }
    out
}

fn mul_small(a: &[u32], m: u32) -> Big {
    let mut out = Vec::with_capacity(a.len() + 1);
    let mut carry = 0u64;
    for &x in a {
        let p = x as u64 * m as u64 + carry;
        out.push(p as u32);
        carry = p >> 32;
    }
    if carry > 0 {
        out.push(carry as u32);
    }
    trim(out)
}

fn mul(a: &[u32], b: &[u32]) -> Big {
    let mut out = vec![0u32; a.len() + b.len()];
    for (i, &x) in a.iter().enumerate() {
        let mut carry = 0u64;
        for (j, &y) in b.iter().enumerate() {
            let t = out[i + j] as u64 + x as u64 * y as u64 + carry;
            out[i + j] = t as u32;
            carry = t >> 32;
        }
        out[i + b.len()] = carry as u32;
    }
    trim(out)
}

fn from(v: u64) -> Big {
    trim(vec![v as u32, (v >> 32) as u32])
}

fn isqrt(n: u64) -> u64 {
    let mut r = (n as f64).sqrt() as u64;
    while r * r > n {
        r -= 1;
    }
    while (r + 1) * (r + 1) <= n {
        r += 1;
    }
    r
}

/// Expands sqrt(d) over one period; returns (period, a checksum of the final convergent).
fn expand(d: u64, history: &mut Vec<Big>) -> (u64, u64) {
    let a0 = isqrt(d);
    let (mut m, mut den, mut a) = (0u64, 1u64, a0);
    // p_{k-1}, p_k and q_{k-1}, q_k, each a fresh allocation per step.
    let (mut p_prev, mut p) = (from(1), from(a0));
    let (mut q_prev, mut q) = (Big::new(), from(1));
    let mut period = 0u64;
    loop {
        m = den * a - m;
        den = (d - m * m) / den;
        a = (a0 + m) / den;
        period += 1;
        if a == 2 * a0 {
            break;
        }
        let p_next = add(&mul_small(&p, a as u32), &p_prev);
        let q_next = add(&mul_small(&q, a as u32), &q_prev);
        // Keep a short window of old convergents alive, as cfrac keeps its candidates.
        if history.len() >= 8 {
            history.remove(0);
        }
        history.push(std::mem::replace(
            &mut p_prev,
            std::mem::replace(&mut p, p_next),
        ));
        q_prev = std::mem::replace(&mut q, q_next);
    }
    // Pell: p^2 - d q^2 = (-1)^period.
    let pp = mul(&p, &p);
    let dqq = mul_small(&mul(&q, &q), d as u32);
    let ok = if period.is_multiple_of(2) {
        pp == add(&dqq, &[1])
    } else {
        add(&pp, &[1]) == dqq
    };
    assert!(
        ok,
        "cfrac: Pell's equation fails for D={d} (a corrupted bignum)"
    );
    let sum = p
        .iter()
        .chain(q.iter())
        .fold(0u64, |s, &l| s.rotate_left(5) ^ l as u64);
    (period, sum)
}

pub fn run(args: &Args) -> Result<(), String> {
    let size: u64 = args.number(super::default_size("cfrac"))?;
    let start = Mark::now();
    let mut history = Vec::new();
    let (mut done, mut d, mut checksum, mut terms) = (0u64, 1u64, 0u64, 0u64);
    while done < size {
        d = if d >= 4000 { 2 } else { d + 1 };
        let r = isqrt(d);
        if r * r == d {
            continue;
        }
        let (period, sum) = expand(d, &mut history);
        terms += period;
        checksum = checksum.rotate_left(7) ^ sum;
        done += 1;
    }
    finish("cfrac", size, 1, start, checksum, &format!("terms={terms}"));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pell_solutions() {
        // sqrt(2) = [1; 2], period 1: 1^2 - 2*1^2 = -1; sqrt(61) has the famous large solution.
        let mut h = Vec::new();
        assert_eq!(expand(2, &mut h).0, 1);
        assert_eq!(expand(61, &mut h).0, 11);
        assert_eq!(
            mul(&from(u32::MAX as u64), &from(u32::MAX as u64)),
            from(0xffff_fffe_0000_0001)
        );
    }
}
