//! Two users and a group against a real cluster, through the `maat` binary.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::Cluster;

#[test]
fn private_files_groups_chmod_and_cli_errors() {
    let cluster = Cluster::start(3, &[]);
    let admin = cluster.admin_home();
    cluster.ok(&admin, &["admin", "group", "add", "team"], None);
    cluster.add_user("alice", "alice passphrase", Some("team"));
    cluster.add_user("bob", "bob passphrase", None);
    cluster.add_user("carol", "carol passphrase", None);
    cluster.ok(
        &admin,
        &["admin", "group", "member", "add", "team", "carol"],
        None,
    );

    let alice = cluster.home("alice");
    let bob = cluster.home("bob");
    let carol = cluster.home("carol");
    cluster.ok(
        &alice,
        &["login", "alice", "--passphrase-stdin"],
        Some(b"alice passphrase\n"),
    );
    cluster.ok(
        &bob,
        &["login", "bob", "--passphrase-stdin"],
        Some(b"bob passphrase\n"),
    );
    cluster.ok(
        &carol,
        &["login", "carol", "--passphrase-stdin"],
        Some(b"carol passphrase\n"),
    );
    // A wrong passphrase is refused without saying whether the user exists.
    let known = cluster.fails(
        &cluster.home("mallory"),
        &["login", "bob", "--passphrase-stdin"],
        Some(b"guess\n"),
    );
    let unknown = cluster.fails(
        &cluster.home("mallory"),
        &["login", "nobody", "--passphrase-stdin"],
        Some(b"guess\n"),
    );
    assert_eq!(
        known,
        "maat: authentication failed: wrong name or passphrase (or not the MDS this user registered with)\n"
    );
    assert_eq!(
        unknown, known,
        "the answer must not reveal which users exist"
    );

    // New files are 0644: private only after chmod 600.
    cluster.ok(
        &alice,
        &["put", "-", "/home/alice/diary"],
        Some(b"dear diary"),
    );
    let stat = String::from_utf8(cluster.ok(&alice, &["stat", "/home/alice/diary"], None)).unwrap();
    assert!(stat.contains("mode: 0644"), "{stat}");
    cluster.ok(&alice, &["chmod", "600", "/home/alice/diary"], None);
    let err = cluster.fails(&bob, &["cat", "/home/alice/diary"], None);
    assert!(err.starts_with("maat: permission denied"), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    // Bob cannot chmod it back either, nor write into alice's home.
    let err = cluster.fails(&bob, &["chmod", "644", "/home/alice/diary"], None);
    assert!(err.contains("permission denied"), "{err}");
    let err = cluster.fails(&bob, &["put", "-", "/home/alice/spam"], Some(b"x"));
    assert!(err.contains("permission denied"), "{err}");
    // Alice opens it up again.
    cluster.ok(&alice, &["chmod", "644", "/home/alice/diary"], None);
    assert_eq!(
        cluster.ok(&bob, &["cat", "/home/alice/diary"], None),
        b"dear diary"
    );

    // Group access: a team file readable by the group only.
    cluster.ok(
        &alice,
        &["put", "-", "/home/alice/plan"],
        Some(b"team plan"),
    );
    cluster.ok(&alice, &["chown", ":team", "/home/alice/plan"], None);
    cluster.ok(&alice, &["chmod", "640", "/home/alice/plan"], None);
    assert_eq!(
        cluster.ok(&carol, &["cat", "/home/alice/plan"], None),
        b"team plan"
    );
    let err = cluster.fails(&bob, &["cat", "/home/alice/plan"], None);
    assert!(err.contains("permission denied"), "{err}");
    // Alice may not give the file to a group she is not in, nor to another owner.
    let err = cluster.fails(&alice, &["chown", ":bob", "/home/alice/plan"], None);
    assert!(err.contains("permission denied"), "{err}");
    let err = cluster.fails(&alice, &["chown", "bob", "/home/alice/plan"], None);
    assert!(err.contains("permission denied"), "{err}");

    // Namespace operations and their errors.
    cluster.ok(&alice, &["mkdir", "-p", "/home/alice/a/b/c"], None);
    cluster.ok(
        &alice,
        &["mv", "/home/alice/plan", "/home/alice/a/b/plan"],
        None,
    );
    let ls = String::from_utf8(cluster.ok(&alice, &["ls", "-l", "/home/alice/a/b"], None)).unwrap();
    assert!(
        ls.contains("plan") && ls.contains("rw-r-----") && ls.contains("team"),
        "{ls}"
    );
    // Times read as dates (UTC), and as epoch milliseconds on request.
    let is_date = |w: &str| w.len() == 10 && w.as_bytes()[4] == b'-' && w.as_bytes()[7] == b'-';
    assert!(ls.split_whitespace().any(is_date), "{ls}");
    let ls =
        String::from_utf8(cluster.ok(&alice, &["ls", "-l", "--epoch", "/home/alice/a/b"], None))
            .unwrap();
    assert!(
        ls.split_whitespace()
            .any(|w| w.len() == 13 && w.bytes().all(|b| b.is_ascii_digit())),
        "{ls}"
    );
    let err = cluster.fails(&alice, &["rmdir", "/home/alice/a/b"], None);
    assert!(err.contains("directory not empty"), "{err}");
    let err = cluster.fails(&alice, &["cat", "/home/alice/missing"], None);
    assert!(err.contains("no such file"), "{err}");
    cluster.ok(&alice, &["rm", "/home/alice/a/b/plan"], None);
    cluster.ok(&alice, &["rmdir", "/home/alice/a/b/c"], None);
    let err = cluster.fails(&alice, &["cat", "/home/alice/a/b/plan"], None);
    assert!(err.contains("no such file"), "{err}");
    // Only the administrator administers.
    let err = cluster.fails(&alice, &["admin", "group", "add", "evil"], None);
    assert!(err.contains("permission denied"), "{err}");

    // Large file: striped over OSDs, read back byte-identical through `get`.
    let big: Vec<u8> = (0..1_700_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let src = cluster.dir.path().join("big.in");
    let dst = cluster.dir.path().join("big.out");
    std::fs::write(&src, &big).unwrap();
    cluster.ok(
        &alice,
        &["put", src.to_str().unwrap(), "/home/alice/big"],
        None,
    );
    cluster.ok(
        &bob,
        &["get", "/home/alice/big", dst.to_str().unwrap()],
        None,
    );
    assert_eq!(std::fs::read(&dst).unwrap(), big);

    // Logout ends the session locally and at the MDS: a copy of the session file kept
    // from before is refused afterwards.
    let saved = std::fs::read(bob.join("session.json")).unwrap();
    cluster.ok(&bob, &["logout"], None);
    let err = cluster.fails(&bob, &["cat", "/home/alice/diary"], None);
    assert!(err.contains("not logged in"), "{err}");
    // Put back with the mode the client requires (it refuses a session file that others
    // can read, which a plain `fs::write` under the test's umask would make).
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(bob.join("session.json"))
            .unwrap();
        f.write_all(&saved).unwrap();
    }
    let err = cluster.fails(&bob, &["cat", "/home/alice/diary"], None);
    assert!(err.contains("unknown session"), "{err}");

    // Stats show signatures and cache hits per daemon.
    let stats = cluster.ok(&admin, &["stats", "--json"], None);
    let v: serde_json::Value = serde_json::from_slice(&stats).unwrap();
    assert!(v["mds"]["signatures_made"].as_u64().unwrap() > 0, "{v}");
    assert!(v["osd 1"]["requests"].as_u64().is_some(), "{v}");
    assert!(v["client"].is_object(), "{v}");
}

#[test]
fn restart_resumes_with_data_users_and_keys() {
    let cluster = Cluster::start(2, &[]);
    cluster.add_user("dave", "dave passphrase", None);
    let dave = cluster.home("dave");
    cluster.ok(
        &dave,
        &["login", "dave", "--passphrase-stdin"],
        Some(b"dave passphrase\n"),
    );
    cluster.ok(
        &dave,
        &["put", "-", "/home/dave/keep"],
        Some(b"kept across restarts"),
    );
    // Capture a sealed request that the MDS accepted, to replay it after the restart.
    let c = cluster.user_client("dave", "dave passphrase");
    let (sid, key) = c.mds_session().unwrap();
    let key = *key.expose();
    let key = maat_proto::wire::envelope_key(&key);
    let body = maat_proto::msg::encode(&maat_proto::msg::MdsRequest::Stat {
        path: "/home/dave/keep".into(),
    })
    .unwrap();
    let sealed = maat_proto::wire::seal_request(
        &key,
        &sid,
        maat_proto::UnixMillis(c.protocol_now()),
        &[77u8; 16],
        &body,
    );
    let mds_address = maat_client::ClusterFile::load(&cluster.cluster_file())
        .unwrap()
        .mds;
    let mut conn = maat_net::Connection::new(mds_address.clone());
    let (t, _) = conn
        .call(maat_proto::wire::FrameType::Request, &sealed)
        .unwrap();
    assert_eq!(t, maat_proto::wire::FrameType::Response);

    let mut restarted = cluster;
    restarted.restart();
    // The replay window is in memory, but the restart does not reopen it: the captured
    // request predates the new boot and is refused as stale.
    let mut conn = maat_net::Connection::new(mds_address);
    let (t, answer) = conn
        .call(maat_proto::wire::FrameType::Request, &sealed)
        .unwrap();
    assert_eq!(t, maat_proto::wire::FrameType::Refusal);
    let refusal: maat_proto::msg::WireError = maat_proto::msg::decode(&answer).unwrap();
    assert_eq!(refusal.code, maat_proto::msg::ErrorCode::StaleRequest);
    // The session survives too (sessions are in the MDS store); a new login works as well.
    assert_eq!(
        restarted.ok(&dave, &["cat", "/home/dave/keep"], None),
        b"kept across restarts"
    );
    let fresh = restarted.home("dave2");
    restarted.ok(
        &fresh,
        &["login", "dave", "--passphrase-stdin"],
        Some(b"dave passphrase\n"),
    );
    assert_eq!(
        restarted.ok(&fresh, &["cat", "/home/dave/keep"], None),
        b"kept across restarts"
    );
}

#[test]
fn a_read_reuses_a_cached_read_write_capability_only_while_the_user_may_write() {
    use maat_proto::capability::{Capability, Mode};
    use maat_proto::msg::Access;
    use maat_proto::signed::Unverified;
    let mode_of = |bytes: &[u8]| {
        Unverified::<Capability>::decode(bytes)
            .unwrap()
            .unverified_body()
            .mode
    };
    let cluster = Cluster::start(1, &[]);
    cluster.add_user("erin", "erin passphrase", None);
    let erin = cluster.user_client("erin", "erin passphrase");
    let data = b"reuse me".to_vec();
    erin.put(
        &mut data.as_slice(),
        data.len() as u64,
        "/home/erin/f",
        &mut |_| {},
    )
    .unwrap();
    // (The put stored under a reserved id and kept its own open: these opens are the
    // MDS's to answer.)
    erin.forget_opens();
    let rw = erin.open("/home/erin/f", Access::ReadWrite, None).unwrap();
    assert_eq!(mode_of(&rw.capability), Mode::READ_WRITE);
    // A read while erin may write: the cached read-write capability, no new signature.
    erin.forget_opens();
    let read = erin.open("/home/erin/f", Access::Read, None).unwrap();
    assert!(read.mds_cached);
    assert_eq!(read.capability, rw.capability);
    // Once erin may no longer write, a read gets a read-only capability.
    erin.chmod("/home/erin/f", 0o444).unwrap();
    let read = erin.open("/home/erin/f", Access::Read, None).unwrap();
    assert_eq!(mode_of(&read.capability), Mode::READ);
    assert_ne!(read.capability, rw.capability);
}

/// SPEC M5 after a put: the put's open was read-write, so the client reads back what it
/// just wrote without asking the MDS, and the OSD has already checked the capability.
#[test]
fn a_client_reads_back_what_it_wrote_without_asking_the_mds_again() {
    let cluster = Cluster::start(2, &[]);
    cluster.add_user("erin", "erin passphrase", None);
    let erin = cluster.user_client("erin", "erin passphrase");
    let put = |data: &[u8]| {
        erin.put(
            &mut &data[..],
            data.len() as u64,
            "/home/erin/f",
            &mut |_| {},
        )
        .unwrap();
    };
    let get = || {
        let mut out = Vec::new();
        erin.get("/home/erin/f", &mut out, &mut |_| {}).unwrap();
        out
    };
    let long: Vec<u8> = (0..1_100_000u32).map(|i| (i % 251) as u8).collect();
    put(&long);
    let signed = common::counter(&erin, "mds", "signatures_made");
    let verified = common::counter(&erin, "osd", "signatures_verified");
    let before = erin.client_stats();
    assert_eq!(get(), long);
    let after = erin.client_stats();
    assert_eq!(
        after.capability_cache_hits,
        before.capability_cache_hits + 1
    );
    assert_eq!(
        after.capability_cache_misses,
        before.capability_cache_misses
    );
    assert_eq!(common::counter(&erin, "mds", "signatures_made"), signed);
    assert_eq!(
        common::counter(&erin, "osd", "signatures_verified"),
        verified
    );
    // A shorter put replaces the kept open (its size with it): the read stops at the new
    // end, in the first stripe.
    put(b"short now");
    assert_eq!(get(), b"short now");
    // Once erin may write but not read, her put's open carries a write-only capability:
    // it is not kept for reading, and her get asks the MDS, which refuses it.
    erin.chmod("/home/erin/f", 0o200).unwrap();
    put(b"blind");
    let before = erin.client_stats();
    let mut out = Vec::new();
    assert!(erin.get("/home/erin/f", &mut out, &mut |_| {}).is_err());
    assert_eq!(
        erin.client_stats().capability_cache_hits,
        before.capability_cache_hits
    );
    // Another user's client keeps its own opens: bob may not read erin's 0600 file.
    erin.chmod("/home/erin/f", 0o600).unwrap();
    cluster.add_user("bob", "bob passphrase", None);
    let bob = cluster.user_client("bob", "bob passphrase");
    let mut out = Vec::new();
    assert!(bob.get("/home/erin/f", &mut out, &mut |_| {}).is_err());
}

#[test]
fn a_first_put_on_a_new_cluster_shows_no_refusals() {
    // Found trying Maat as a new user: `maat stats` after a first put showed a dozen MDS
    // refusals, all `maat up`'s own polling inside the MDS's first 500 ms. Those are now
    // "not ready" waits, shown by reason and not counted as refusals.
    let cluster = Cluster::start(2, &[]);
    let admin = cluster.admin_home();
    cluster.ok(&admin, &["put", "-", "/first"], Some(b"hello"));
    let stats = cluster.ok(&admin, &["stats", "--json"], None);
    let v: serde_json::Value = serde_json::from_slice(&stats).unwrap();
    for daemon in ["mds", "osd 1", "osd 2"] {
        assert_eq!(v[daemon]["refusals"].as_u64(), Some(0), "{daemon}: {v}");
    }
    let text = String::from_utf8(cluster.ok(&admin, &["stats"], None)).unwrap();
    assert!(text.contains("refused"), "{text}");
    // The waits are not listed among the refusals either, but on a line of their own.
    for line in text.lines().filter(|l| l.starts_with("refused, by reason")) {
        assert!(!line.contains("NotReady"), "{text}");
    }
}

/// Found trying the quick start: `maat stats | head -4` panicked ("failed printing to
/// stdout: Broken pipe") once `head` had closed the pipe. A command whose reader goes
/// away ends quietly and successfully, as Unix tools do.
#[test]
fn a_command_whose_reader_closes_the_pipe_ends_quietly() {
    let cluster = Cluster::start(1, &[]);
    for args in [&["stats"][..], &["ls", "-l", "/"][..]] {
        let child = std::process::Command::new(common::MAAT)
            .args(args)
            .env("MAAT_CLUSTER", cluster.cluster_file())
            .env("MAAT_HOME", cluster.admin_home())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The reader goes before the command has asked the daemons anything, so its
        // first line meets a closed pipe.
        let mut child = child;
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "maat {args:?}: {:?} {stderr}",
            out.status
        );
        assert!(stderr.is_empty(), "maat {args:?}: {stderr}");
    }
}

/// SPEC T1 through the CLI: the administrator makes a partition with a method, a user
/// puts files in it by making a directory in it, `maat stat` shows partition and method,
/// `set-security` changes it; NOSEC is refused without the danger flag, by the MDS for a
/// partition and by `maat up` for a cluster (before it writes anything).
#[test]
fn partitions_are_made_and_chosen_through_the_cli_and_nosec_needs_the_danger_flag() {
    let cluster = Cluster::start(1, &[]);
    let admin = cluster.admin_home();
    let text = |out: Vec<u8>| String::from_utf8(out).unwrap();
    cluster.ok(
        &admin,
        &[
            "admin",
            "partition",
            "create",
            "fast",
            "--security",
            "CMDRSP",
        ],
        None,
    );
    let list = text(cluster.ok(&admin, &["admin", "partition", "list"], None));
    assert!(
        list.lines()
            .any(|l| l.contains("fast") && l.contains("CMDRSP")),
        "{list}"
    );
    cluster.ok(&admin, &["mkdir", "--partition", "fast", "/f"], None);
    cluster.ok(&admin, &["put", "-", "/f/x"], Some(b"in fast"));
    let stat = text(cluster.ok(&admin, &["stat", "/f/x"], None));
    assert!(stat.contains("partition: fast"), "{stat}");
    assert!(stat.contains("security: CMDRSP"), "{stat}");
    // The cluster default is ALLDATA.
    cluster.ok(&admin, &["put", "-", "/y"], Some(b"default"));
    let stat = text(cluster.ok(&admin, &["stat", "/y"], None));
    assert!(stat.contains("security: ALLDATA"), "{stat}");
    cluster.ok(
        &admin,
        &["admin", "partition", "set-security", "fast", "CONFIDENTIAL"],
        None,
    );
    let stat = text(cluster.ok(&admin, &["stat", "/f/x"], None));
    assert!(stat.contains("security: CONFIDENTIAL"), "{stat}");
    assert_eq!(cluster.ok(&admin, &["cat", "/f/x"], None), b"in fast");
    for args in [
        &[
            "admin",
            "partition",
            "create",
            "open",
            "--security",
            "NOSEC",
        ][..],
        &["admin", "partition", "set-security", "fast", "NOSEC"][..],
    ] {
        let e = cluster.fails(&admin, args, None);
        assert!(e.contains("danger flag"), "{args:?}: {e}");
    }
    let data = cluster.dir.path().join("insecure");
    let out = std::process::Command::new(common::MAAT)
        .args(["up", "--security", "NOSEC", "--data"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("--danger-allow-insecure"), "{e}");
    let left: Vec<_> = std::fs::read_dir(&data)
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "a refused start left {left:?}");
}

/// A user logged in at a home of their own (`cluster.home(name)`).
fn logged_in(cluster: &Cluster, name: &str) -> std::path::PathBuf {
    let pass = format!("{name} passphrase");
    cluster.add_user(name, &pass, None);
    let home = cluster.home(name);
    cluster.ok(
        &home,
        &["login", name, "--passphrase-stdin"],
        Some(format!("{pass}\n").as_bytes()),
    );
    home
}

/// Issue 40, items 4, 6, 7 and 9 through the CLI on a cluster with `maat up`'s defaults:
/// what a user makes is private (umask 077, homes 0700) until they run `maat umask`;
/// `chmod 1777` makes a sticky directory whose files only their owners remove; `ls`
/// escapes a name that holds control characters; `admin user add` says where the home is
/// and when there is none.
#[test]
fn defaults_are_private_sticky_directories_hold_and_output_says_what_is() {
    let cluster = Cluster::start_as_shipped(1, &["--no-metrics"]);
    let admin = cluster.admin_home();
    let alice = logged_in(&cluster, "alice");
    let bob = logged_in(&cluster, "bob");
    let long = |home: &std::path::Path, path: &str| {
        String::from_utf8(cluster.ok(home, &["ls", "-l", path], None)).unwrap()
    };
    assert!(
        long(&admin, "/home").contains("drwx------ alice"),
        "{}",
        long(&admin, "/home")
    );
    assert_eq!(cluster.ok(&alice, &["umask"], None), b"077\n");
    cluster.ok(&alice, &["put", "-", "/home/alice/mine"], Some(b"private"));
    assert!(long(&alice, "/home/alice").contains("-rw------- alice"));
    // Alice opens her home and shares one file by umask: bob reads that one only.
    cluster.ok(&alice, &["chmod", "755", "/home/alice"], None);
    assert_eq!(cluster.ok(&alice, &["umask", "022"], None), b"022\n");
    cluster.ok(
        &alice,
        &["put", "-", "/home/alice/shared"],
        Some(b"for all"),
    );
    assert!(long(&alice, "/home/alice").contains("-rw-r--r-- alice"));
    assert_eq!(
        cluster.ok(&bob, &["cat", "/home/alice/shared"], None),
        b"for all"
    );
    let said = cluster.fails(&bob, &["cat", "/home/alice/mine"], None);
    assert!(said.contains("ermission"), "{said}");
    // A sticky, world-writable directory: bob cannot remove alice's file in it.
    cluster.ok(&admin, &["mkdir", "/tmp"], None);
    cluster.ok(&admin, &["chmod", "1777", "/tmp"], None);
    assert!(
        long(&admin, "/").contains("drwxrwxrwt"),
        "{}",
        long(&admin, "/")
    );
    cluster.ok(&alice, &["put", "-", "/tmp/alices"], Some(b"x"));
    let said = cluster.fails(&bob, &["rm", "/tmp/alices"], None);
    assert!(said.contains("sticky"), "{said}");
    let said = cluster.fails(&bob, &["mv", "/tmp/alices", "/tmp/bobs"], None);
    assert!(said.contains("sticky"), "{said}");
    cluster.ok(&alice, &["rm", "/tmp/alices"], None);
    // Names: none is made with a control character (output escapes them: `show.rs`).
    let said = cluster.fails(&alice, &["put", "-", "/tmp/a\nb"], Some(b"x"));
    assert!(said.contains("control characters"), "{said}");
    // The administrator removes /home: a new user is told there is no home.
    cluster.ok(&admin, &["rm", "/home/alice/mine"], None);
    cluster.ok(&admin, &["rm", "/home/alice/shared"], None);
    for d in ["/home/alice", "/home/bob", "/home"] {
        cluster.ok(&admin, &["rmdir", d], None);
    }
    let out = cluster.maat(
        &admin,
        &["admin", "user", "add", "carol", "--passphrase-stdin"],
        Some(b"carol passphrase\n"),
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("without a home"), "{said}");
    cluster.fails(&admin, &["stat", "/home/carol"], None);
}

/// Issue 40, item 8 through the CLI: `maat passwd` proves the current passphrase (a wrong
/// one changes nothing, also from a copy of the session), the new one logs in and the old
/// does not, the user's other sessions end; `maat admin user reset` needs no current
/// passphrase, is the administrator's alone, and ends the user's sessions.
#[test]
fn passwd_needs_the_current_passphrase_and_the_administrators_reset_is_its_own() {
    let cluster = Cluster::start(1, &[]);
    let admin = cluster.admin_home();
    let alice = logged_in(&cluster, "alice");
    let bob = logged_in(&cluster, "bob");
    // A second session of alice's, and a copy of her first (a stolen session.json).
    let laptop = cluster.home("alice-laptop");
    cluster.ok(
        &laptop,
        &["login", "alice", "--passphrase-stdin"],
        Some(b"alice passphrase\n"),
    );
    let stolen = cluster.home("stolen");
    std::fs::copy(alice.join("session.json"), stolen.join("session.json")).unwrap();
    let said = cluster.fails(
        &stolen,
        &["passwd", "--passphrase-stdin"],
        Some(b"a guess\nthief's passphrase\n"),
    );
    assert!(said.contains("wrong name or passphrase"), "{said}");
    let said = cluster.fails(
        &alice,
        &["passwd", "--passphrase-stdin"],
        Some(b"not it\nnew alice passphrase\n"),
    );
    assert!(said.contains("wrong name or passphrase"), "{said}");
    cluster.ok(
        &alice,
        &["passwd", "--passphrase-stdin"],
        Some(b"alice passphrase\nnew alice passphrase\n"),
    );
    cluster.ok(&alice, &["ls", "/home/alice"], None);
    let said = cluster.fails(&laptop, &["ls", "/home/alice"], None);
    assert!(
        said.contains("session"),
        "the other session goes on: {said}"
    );
    let relogin = cluster.home("alice-again");
    let said = cluster.fails(
        &relogin,
        &["login", "alice", "--passphrase-stdin"],
        Some(b"alice passphrase\n"),
    );
    assert!(said.contains("wrong name or passphrase"), "{said}");
    cluster.ok(
        &relogin,
        &["login", "alice", "--passphrase-stdin"],
        Some(b"new alice passphrase\n"),
    );
    // The reset: not bob's to make; the administrator's, which ends alice's sessions.
    let said = cluster.fails(
        &bob,
        &["admin", "user", "reset", "alice", "--passphrase-stdin"],
        Some(b"bob chose this\n"),
    );
    assert!(said.contains("administrator"), "{said}");
    cluster.ok(
        &admin,
        &["admin", "user", "reset", "alice", "--passphrase-stdin"],
        Some(b"reset by admin\n"),
    );
    for home in [&alice, &relogin] {
        cluster.fails(home, &["ls", "/home/alice"], None);
    }
    cluster.ok(
        &relogin,
        &["login", "alice", "--passphrase-stdin"],
        Some(b"reset by admin\n"),
    );
    cluster.ok(&relogin, &["ls", "/home/alice"], None);
}
