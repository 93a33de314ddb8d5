#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lode_gateway::fuzzing::acl(data));
