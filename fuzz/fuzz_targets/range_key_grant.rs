#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| maat_proto::decoders::range_key_grant(data));
