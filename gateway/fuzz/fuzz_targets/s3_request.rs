#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lode_gateway::fuzzing::s3_request(data));
