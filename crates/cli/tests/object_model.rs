//! SPEC T5 against a running OSD: user objects with CREATE, WRITE, APPEND, READ,
//! GET/SET ATTRIBUTES, REMOVE under capabilities; partitions, LIST and FORMAT for the
//! administrator only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
use common::Cluster;
use maat_client::Client;
use maat_proto::msg::{
    Access, ErrorCode, ObjectId, OsdCommand, OsdRequest, OsdResponse, DATA_PARTITION,
};

fn call(
    c: &mut Client,
    osd: u64,
    capability: &[u8],
    command: OsdCommand,
) -> Result<OsdResponse, ErrorCode> {
    c.osd_call(
        osd,
        OsdRequest {
            capability: capability.to_vec(),
            command,
        },
    )
    .map_err(|e| e.code().unwrap_or_else(|| panic!("not a refusal: {e}")))
}

#[test]
fn object_commands_and_administrative_commands() {
    let cluster = Cluster::start(1, &[]);
    cluster.add_user("erin", "erin pass", None);
    let mut erin = cluster.user_client("erin", "erin pass");
    let opened = erin
        .open("/home/erin/obj", Access::ReadWrite, Some(0o600))
        .unwrap();
    let cap = opened.capability.clone();
    let object = ObjectId {
        partition: DATA_PARTITION,
        file: opened.stat.id,
        stripe: 0,
    };
    let osd = 1;
    assert_eq!(
        call(&mut erin, osd, &cap, OsdCommand::Create { object }),
        Ok(OsdResponse::Ok)
    );
    call(
        &mut erin,
        osd,
        &cap,
        OsdCommand::Write {
            object,
            offset: 0,
            data: b"hello".to_vec(),
            replace: false,
        },
    )
    .unwrap();
    call(
        &mut erin,
        osd,
        &cap,
        OsdCommand::Append {
            object,
            data: b" world".to_vec(),
        },
    )
    .unwrap();
    call(
        &mut erin,
        osd,
        &cap,
        OsdCommand::Write {
            object,
            offset: 0,
            data: b"J".to_vec(),
            replace: false,
        },
    )
    .unwrap();
    assert_eq!(
        call(
            &mut erin,
            osd,
            &cap,
            OsdCommand::Read {
                object,
                offset: 0,
                length: 100
            }
        ),
        Ok(OsdResponse::Data(b"Jello world".to_vec()))
    );
    assert_eq!(
        call(
            &mut erin,
            osd,
            &cap,
            OsdCommand::Read {
                object,
                offset: 6,
                length: 3
            }
        ),
        Ok(OsdResponse::Data(b"wor".to_vec()))
    );
    call(
        &mut erin,
        osd,
        &cap,
        OsdCommand::SetAttributes {
            object,
            policy_tag: 7,
            user: vec![("color".into(), b"blue".to_vec())],
        },
    )
    .unwrap();
    match call(&mut erin, osd, &cap, OsdCommand::GetAttributes { object }).unwrap() {
        OsdResponse::Attributes(a) => {
            assert_eq!(a.size, 11);
            assert_eq!(a.policy_tag, 7);
            assert_eq!(a.user, vec![("color".to_string(), b"blue".to_vec())]);
            assert!(a.mtime > 0);
        }
        other => panic!("{other:?}"),
    }
    // Bounds: nothing beyond one stripe unit, so no request makes the OSD allocate more.
    assert_eq!(
        call(
            &mut erin,
            osd,
            &cap,
            OsdCommand::Read {
                object,
                offset: 0,
                length: u32::MAX
            }
        ),
        Err(ErrorCode::TooLarge)
    );
    assert_eq!(
        call(
            &mut erin,
            osd,
            &cap,
            OsdCommand::Write {
                object,
                offset: 1 << 40,
                data: b"x".to_vec(),
                replace: false
            }
        ),
        Err(ErrorCode::TooLarge)
    );
    // A capability reaches its file in the data partition only.
    let elsewhere = ObjectId {
        partition: 9,
        ..object
    };
    assert_eq!(
        call(
            &mut erin,
            osd,
            &cap,
            OsdCommand::Read {
                object: elsewhere,
                offset: 0,
                length: 1
            }
        ),
        Err(ErrorCode::PermissionDenied)
    );
    // Administrative commands are refused to users, even with a valid capability.
    for command in [
        OsdCommand::List {
            partition: DATA_PARTITION,
        },
        OsdCommand::CreatePartition { partition: 9 },
        OsdCommand::RemovePartition { partition: 9 },
        OsdCommand::Format,
    ] {
        assert_eq!(
            call(&mut erin, osd, &cap, command),
            Err(ErrorCode::PermissionDenied)
        );
    }
    // The administrator can list, manage partitions, and sees erin's object.
    let mut admin = cluster.admin_client();
    match call(
        &mut admin,
        osd,
        &[],
        OsdCommand::List {
            partition: DATA_PARTITION,
        },
    )
    .unwrap()
    {
        OsdResponse::Objects(list) => assert!(list.contains(&object), "{list:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        call(
            &mut admin,
            osd,
            &[],
            OsdCommand::CreatePartition { partition: 9 }
        ),
        Ok(OsdResponse::Ok)
    );
    assert_eq!(
        call(&mut admin, osd, &[], OsdCommand::List { partition: 9 }),
        Ok(OsdResponse::Objects(vec![]))
    );
    assert_eq!(
        call(
            &mut admin,
            osd,
            &[],
            OsdCommand::RemovePartition { partition: 9 }
        ),
        Ok(OsdResponse::Ok)
    );
    assert_eq!(
        call(&mut admin, osd, &[], OsdCommand::List { partition: 9 }),
        Err(ErrorCode::InvalidArgument)
    );
    // Remove, then reads say "no such object".
    assert_eq!(
        call(&mut erin, osd, &cap, OsdCommand::Remove { object }),
        Ok(OsdResponse::Ok)
    );
    assert_eq!(
        call(
            &mut erin,
            osd,
            &cap,
            OsdCommand::Read {
                object,
                offset: 0,
                length: 1
            }
        ),
        Err(ErrorCode::NoSuchObject)
    );
    // FORMAT erases everything.
    erin.put(&mut &b"doomed"[..], 6, "/home/erin/doomed", &mut |_| {})
        .unwrap();
    assert_eq!(
        call(&mut admin, osd, &[], OsdCommand::Format),
        Ok(OsdResponse::Ok)
    );
    match call(
        &mut admin,
        osd,
        &[],
        OsdCommand::List {
            partition: DATA_PARTITION,
        },
    )
    .unwrap()
    {
        OsdResponse::Objects(list) => assert!(list.is_empty(), "{list:?}"),
        other => panic!("{other:?}"),
    }
}
