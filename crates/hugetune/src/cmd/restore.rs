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
    let said = kernel_state::recover_journal()?;
    if said.is_empty() {
        println!("nothing to restore: no dead hugetune left kernel changes in force");
    }
    for s in &said {
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
    Ok(
        if said
            .iter()
            .any(|s| s.starts_with("could not") || s.contains("left alone"))
        {
            1
        } else {
            0
        },
    )
}
