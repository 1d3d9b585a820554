#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| maat_proto::decoders::fenced_key_command(data));
