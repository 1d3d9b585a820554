//! SPEC M3–M7 against real daemons: a UNIX-group capability names its users by a Merkle
//! root, OSDs fetch the tree through the client (M4), a stolen grouped capability or a
//! forged tree is refused with a typed error, and a chmod ends access within one
//! capability lifetime with no message to any OSD (M7).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::{code, counter, Cluster};
use maat_client::{ClientError, Opened};
use maat_proto::capability::{Capability, Principals};
use maat_proto::merkle_msg::{MerkleTreeMessage, SetKind};
use maat_proto::msg::{Access, ErrorCode, MdsRequest, OsdCommand, OsdRequest};
use maat_proto::signed::Unverified;

#[test]
fn a_group_capability_is_checked_by_tree_and_a_chmod_ends_access_within_one_lifetime() {
    let cluster = Cluster::start(2, &["--grouping", "unix", "--capability-lifetime", "4"]);
    let admin_home = cluster.admin_home();
    cluster.ok(&admin_home, &["admin", "group", "add", "team"], None);
    cluster.add_user("alice", "alice passphrase", Some("team"));
    cluster.add_user("bob", "bob passphrase", Some("team"));
    cluster.add_user("dave", "dave passphrase", Some("team"));
    cluster.add_user("carol", "carol passphrase", None);
    let admin = cluster.admin_client();
    admin.mkdir("/proj", 0o777, false).unwrap();

    let alice = cluster.user_client("alice", "alice passphrase");
    let data = vec![7u8; 100_000];
    alice
        .put(&mut &data[..], data.len() as u64, "/proj/data", &mut |_| {})
        .unwrap();
    alice.chmod("/proj/data", 0o640).unwrap();
    alice.chown("/proj/data", None, Some("team")).unwrap();

    // Bob (group) reads: his capability names owner and group by one Merkle root; the
    // OSDs have not seen it, ask for the tree, and bob's client supplies it.
    let supplied_before = counter(&admin, "osd", "trees_supplied");
    let mut bob = cluster.user_client("bob", "bob passphrase");
    let mut out = Vec::new();
    bob.get("/proj/data", &mut out, &mut |_| {}).unwrap();
    assert_eq!(out, data);
    assert!(counter(&admin, "osd", "trees_supplied") > supplied_before);
    let bobs: Opened = bob.open("/proj/data", Access::Read, None).unwrap();
    let body = Unverified::<Capability>::decode(&bobs.capability)
        .unwrap()
        .unverified_body()
        .clone();
    let Principals::UserTree(root) = body.users else {
        panic!(
            "bob's capability should name a user set, got {:?}",
            body.users
        )
    };

    // Dave (group) gets the same capability from the MDS cache: no new signature.
    let signed = counter(&admin, "mds", "signatures_made");
    let dave = cluster.user_client("dave", "dave passphrase");
    let daves = dave.open("/proj/data", Access::Read, None).unwrap();
    assert!(daves.mds_cached);
    assert_eq!(daves.capability, bobs.capability);
    let mut out = Vec::new();
    dave.get("/proj/data", &mut out, &mut |_| {}).unwrap();
    assert_eq!(out, data);
    // (logins sign tickets: count only what the open and read cost)
    let after = counter(&admin, "mds", "signatures_made");
    assert!(
        after - signed <= 1,
        "dave's login may sign a ticket; his open signs nothing"
    );
    // `maat stats` reports it per strategy.
    let stats = String::from_utf8(cluster.ok(&admin_home, &["stats"], None)).unwrap();
    let unix = stats
        .lines()
        .find(|l| l.starts_with("grouping unix: "))
        .unwrap_or_else(|| panic!("no UNIX grouping line in:\n{stats}"));
    assert!(!unix.starts_with("grouping unix: 0 capabilities"), "{unix}");

    // Carol (other) may not open it, may not fetch the tree, and bob's capability is
    // useless to her: the OSD checks that the authenticated user is in the set.
    let mut carol = cluster.user_client("carol", "carol passphrase");
    assert_eq!(
        code(carol.open("/proj/data", Access::Read, None)),
        ErrorCode::PermissionDenied
    );
    assert_eq!(
        code(carol.mds_call(MdsRequest::GetTree { root })),
        ErrorCode::PermissionDenied
    );
    // (Both read stripe 0 from the same copy, whose OSD bob's read gave the tree: with
    // reads spread over copies, carol's first copy could otherwise lack it, and her
    // client's fetch of the tree is refused first, `PermissionDenied`.)
    bob.set_read_spread(0);
    carol.set_read_spread(0);
    bob.read_object(&bobs, 0).unwrap();
    assert_eq!(code(carol.read_object(&bobs, 0)), ErrorCode::WrongUser);

    // A forged tree (carol added to the members) does not rebuild the root.
    let forged = MerkleTreeMessage::new(SetKind::Users, vec![vec![2, 3, 4, 5, 6]])
        .unwrap()
        .encode();
    let osd = bob.place(bobs.stat.id, 0).unwrap();
    let supply = |tree: Vec<u8>, capability: Vec<u8>| OsdRequest {
        capability,
        command: OsdCommand::SupplyTree { tree },
    };
    assert_eq!(
        code(carol.osd_call(osd, supply(forged.clone(), bobs.capability.clone()))),
        ErrorCode::TreeMismatch
    );
    // A tree offered with a capability that names no set is refused too.
    let alices = alice.open("/proj/data", Access::ReadWrite, None).unwrap();
    assert_eq!(
        code(alice.osd_call(osd, supply(forged, alices.capability.clone()))),
        ErrorCode::InvalidArgument
    );

    // M7 for membership: dave leaves the group (through the CLI). The MDS refuses him at
    // once and still serves bob; no OSD is told. A primary group or a membership dave
    // no longer has cannot be removed, and each refusal says why.
    let ask = MdsRequest::Open {
        path: "/proj/data".into(),
        access: Access::Read,
        create: None,
    };
    let pushes = counter(&admin, "osd", "revocations_applied");
    cluster.ok(
        &admin_home,
        &["admin", "group", "member", "rm", "team", "dave"],
        None,
    );
    assert_eq!(
        code(dave.mds_call(ask.clone())),
        ErrorCode::PermissionDenied
    );
    bob.mds_call(ask.clone()).unwrap();
    assert_eq!(counter(&admin, "osd", "revocations_applied"), pushes);
    let again = cluster.fails(
        &admin_home,
        &["admin", "group", "member", "rm", "team", "dave"],
        None,
    );
    assert!(again.contains("dave is not a member of team"), "{again}");
    let primary = cluster.fails(
        &admin_home,
        &["admin", "group", "member", "rm", "carol", "carol"],
        None,
    );
    assert!(primary.contains("primary group"), "{primary}");

    // M7: alice takes the group's read away. The MDS refuses bob at once; the capability
    // bob holds keeps working until it expires (no message to any OSD), then is refused.
    assert!(
        bob.read_object(&bobs, 0).unwrap().is_some(),
        "access before the change"
    );
    alice.chmod("/proj/data", 0o600).unwrap();
    let changed = std::time::Instant::now();
    // (asked of the MDS itself: the client's own cache would answer `open` until the
    // capability it holds is half spent)
    assert_eq!(code(bob.mds_call(ask)), ErrorCode::PermissionDenied);
    let mut expired = None;
    while changed.elapsed() < std::time::Duration::from_secs(8) {
        match bob.read_object(&bobs, 0) {
            Ok(_) => std::thread::sleep(std::time::Duration::from_millis(200)),
            Err(e) => {
                expired = Some((changed.elapsed(), e));
                break;
            }
        }
    }
    let (after, e) = expired.expect("bob's capability still works 8 s after a 4 s lifetime");
    assert!(
        matches!(&e, ClientError::Refused(w) if w.code == ErrorCode::CapabilityExpired),
        "{e:?}"
    );
    // Within one lifetime (4 s) plus the backdating margin the MDS gives clocks.
    assert!(after.as_secs_f64() < 4.0 + 1.5, "access lasted {after:?}");
}
