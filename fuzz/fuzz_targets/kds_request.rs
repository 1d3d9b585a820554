#![no_main]
use rand_chacha::rand_core::SeedableRng;

static TARGET: std::sync::OnceLock<Option<maat_kds::fuzzing::Target>> =
    std::sync::OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some(target) = TARGET.get_or_init(|| maat_kds::fuzzing::Target::new().ok()) {
        target.run(data, &mut rand_chacha::ChaCha20Rng::seed_from_u64(0));
    }
});
