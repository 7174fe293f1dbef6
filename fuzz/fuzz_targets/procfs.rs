#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hugetune_fuzzing::procfs(data));
