//! stub
use super::Opts;
use anyhow::Result;
#[allow(unused_variables)]
pub fn run(o: &Opts) -> Result<()> { anyhow::bail!("not yet") }
