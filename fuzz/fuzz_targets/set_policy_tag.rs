#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| maat_proto::decoders::set_policy_tag(data));
