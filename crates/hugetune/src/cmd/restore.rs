//! `hugetune restore`: undoes the kernel changes (hugetlb pools, THP modes,
//! sysfs knobs, tracefs instances) that a hugetune killed outright left in
//! force, from the journal (`hugetune_host::journal`). Every hugetune that
//! changes kernel state does this first anyway; this command does only that,
//! and says what the resting state is afterwards.

use crate::Ctx;
use anyhow::Result;
use hugetune_host::kernel_state;
use hugetune_host::machine;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_ctx: &Ctx, _a: Args) -> Result<i32> {
    let r = kernel_state::recover_journal()?;
    if r.undone.is_empty() && r.problems.is_empty() {
        println!("nothing to restore: no dead hugetune left kernel changes in force");
    }
    for s in r.lines() {
        println!("{s}");
    }
    for kb in [2048, 1 << 20] {
        if let Some(p) = machine::pool(kb) {
            println!(
                "{} hugetlb pool: {} pages ({} free, {} surplus)",
                hugetune_render::bytes(kb << 10),
                p.nr,
                p.free,
                p.surplus
            );
        }
    }
    // A refused entry stays for a person to look at: that is a failure.
    Ok(if r.problems.is_empty() { 0 } else { 1 })
}
