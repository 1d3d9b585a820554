//! What the kernel is told: the errno of each client error and the file type of each
//! stat.

use super::*;

/// The errno for a client error.
pub fn errno(e: &ClientError) -> Errno {
    match e {
        ClientError::Refused(w) => match w.code {
            ErrorCode::NoSuchFile | ErrorCode::NoSuchUser | ErrorCode::NoSuchGroup => Errno::ENOENT,
            ErrorCode::AlreadyExists => Errno::EEXIST,
            ErrorCode::NotADirectory => Errno::ENOTDIR,
            ErrorCode::IsADirectory => Errno::EISDIR,
            ErrorCode::NotEmpty => Errno::ENOTEMPTY,
            ErrorCode::InvalidArgument | ErrorCode::Malformed => Errno::EINVAL,
            ErrorCode::TooLarge => Errno::EFBIG,
            ErrorCode::Busy | ErrorCode::NotReady => Errno::EAGAIN,
            ErrorCode::ObjectDamaged => Errno::EIO,
            // Every other refusal is a security decision: permission, expiry,
            // revocation, a bad MAC or signature, a replay.
            _ => Errno::EACCES,
        },
        ClientError::NotOpenForWriting(_) => Errno::EBADF,
        ClientError::NotLoggedIn => Errno::EACCES,
        ClientError::Net { .. } => Errno::ENOTCONN,
        ClientError::Io { source, .. } => source.raw_os_error().map_or(Errno::EIO, Errno::from_i32),
        ClientError::NotInJob(_) => Errno::EACCES,
        ClientError::InvalidArgument(_) => Errno::EINVAL,
        _ => Errno::EIO,
    }
}

pub(crate) fn kind(s: &FileStat) -> FileType {
    if s.is_dir {
        FileType::Directory
    } else if s.is_symlink() {
        FileType::Symlink
    } else if s.is_fifo() {
        FileType::NamedPipe
    } else if s.is_socket() {
        FileType::Socket
    } else if let Some(block) = s.is_device() {
        if block {
            FileType::BlockDevice
        } else {
            FileType::CharDevice
        }
    } else {
        FileType::RegularFile
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use maat_proto::msg::WireError;

    #[test]
    fn refusals_map_to_the_errno_posix_programs_expect() {
        let refused = |code| ClientError::Refused(WireError::new(code, "x"));
        assert_eq!(errno(&refused(ErrorCode::PermissionDenied)), Errno::EACCES);
        assert_eq!(errno(&refused(ErrorCode::Revoked)), Errno::EACCES);
        assert_eq!(errno(&refused(ErrorCode::NoSuchFile)), Errno::ENOENT);
        assert_eq!(errno(&refused(ErrorCode::AlreadyExists)), Errno::EEXIST);
        assert_eq!(errno(&refused(ErrorCode::NotEmpty)), Errno::ENOTEMPTY);
        assert_eq!(errno(&refused(ErrorCode::IsADirectory)), Errno::EISDIR);
        assert_eq!(errno(&refused(ErrorCode::NotADirectory)), Errno::ENOTDIR);
        assert_eq!(
            errno(&ClientError::NotOpenForWriting("f".into())),
            Errno::EBADF
        );
        // Typed client errors keep their errno: a local I/O error its own.
        let io = ClientError::Io {
            what: "f".into(),
            source: std::io::Error::from_raw_os_error(28),
        };
        assert_eq!(errno(&io), Errno::from_i32(28));
        assert_eq!(
            errno(&ClientError::InvalidArgument("x".into())),
            Errno::EINVAL
        );
        assert_eq!(errno(&ClientError::NotInJob("x".into())), Errno::EACCES);
    }
}
