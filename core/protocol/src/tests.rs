use super::*;

#[test]
fn round_trip_request() {
    let msg = HostMsg::Request {
        id: 7,
        body: Request::Exec(ExecRequest {
            argv: vec!["echo".into(), "hi".into()],
            ..Default::default()
        }),
        window: Some(DEFAULT_WINDOW),
    };
    let frame = encode(&msg);
    let mut cursor = std::io::Cursor::new(frame);
    let back: HostMsg = read_frame(&mut cursor).unwrap().unwrap();
    assert_eq!(back, msg);
    let eof: Option<HostMsg> = read_frame(&mut cursor).unwrap();
    assert!(eof.is_none());
}

#[test]
fn bytes_are_base64() {
    let msg = GuestMsg::Stdout {
        id: 1,
        data: Bytes(vec![0, 255, 10]),
    };
    let json = serde_json::to_string(&msg).unwrap();
    assert_eq!(json, r#"{"t":"stdout","id":1,"data":"AP8K"}"#);
}

#[test]
fn oversized_frame_is_rejected_before_allocation() {
    let mut frame = ((MAX_FRAME_LEN as u32) + 1).to_be_bytes().to_vec();
    frame.extend_from_slice(b"{}");
    let err = read_frame::<_, HostMsg>(&mut std::io::Cursor::new(frame)).unwrap_err();
    assert!(matches!(err, FrameError::TooLarge { .. }));
}

#[test]
fn malformed_and_truncated_frames_are_errors() {
    let mut bad = 5u32.to_be_bytes().to_vec();
    bad.extend_from_slice(b"{oops");
    let err = read_frame::<_, HostMsg>(&mut std::io::Cursor::new(bad)).unwrap_err();
    assert!(matches!(err, FrameError::Malformed(_)));

    let mut short = 10u32.to_be_bytes().to_vec();
    short.extend_from_slice(b"{}");
    let err = read_frame::<_, HostMsg>(&mut std::io::Cursor::new(short)).unwrap_err();
    assert!(matches!(err, FrameError::Truncated));

    let err = read_frame::<_, HostMsg>(&mut std::io::Cursor::new(vec![0u8, 0])).unwrap_err();
    assert!(matches!(err, FrameError::Truncated));
}

#[test]
fn unknown_fields_and_ops_are_rejected() {
    let err = decode::<HostMsg>(br#"{"t":"request","id":1,"body":{"op":"format_disk"}}"#);
    assert!(matches!(err, Err(FrameError::Malformed(_))));
    let err = decode::<HostMsg>(br#"{"t":"cancel","id":1,"extra":true}"#);
    assert!(matches!(err, Err(FrameError::Malformed(_))));
}

/// Reads every frame of `bytes` as `M`.
fn read_all<M: Message>(bytes: Vec<u8>) -> Vec<M> {
    let mut cursor = std::io::Cursor::new(bytes);
    let mut out = Vec::new();
    while let Some(m) = read_message::<_, M>(&mut cursor).unwrap() {
        out.push(m);
    }
    out
}

#[test]
fn data_frames_are_binary_from_version_2() {
    let out = GuestMsg::Stdout {
        id: 0x0102_0304_0506_0708,
        data: Bytes(b"hi".to_vec()),
    };
    let v2 = encode_for(&out, 2);
    assert_eq!(
        v2,
        [&[0x80, 0, 0, 11, 1, 1, 2, 3, 4, 5, 6, 7, 8][..], b"hi"].concat()
    );
    // Protocol 1 keeps JSON.
    assert_eq!(encode_for(&out, 1), encode(&out));
    let err = GuestMsg::Stderr {
        id: 3,
        data: Bytes(vec![0; MAX_CHUNK]),
    };
    let input = HostMsg::Data {
        id: 9,
        data: Bytes(vec![]),
    };
    let window = HostMsg::Window { id: 9, bytes: 77 };
    let read: Vec<GuestMsg> = read_all([v2, encode_for(&err, 2)].concat());
    assert_eq!(read, vec![out, err]);
    let read: Vec<HostMsg> = read_all([encode_for(&input, 2), encode_for(&window, 2)].concat());
    assert_eq!(read, vec![input, window]);
}

#[test]
fn bad_data_frames_are_refused() {
    // Output sent the wrong way, an unknown kind, a frame shorter than its prefix.
    let stdout = encode_for(
        &GuestMsg::Stdout {
            id: 1,
            data: Bytes(vec![1]),
        },
        2,
    );
    let err = read_message::<_, HostMsg>(&mut std::io::Cursor::new(stdout)).unwrap_err();
    assert!(matches!(err, FrameError::BadData { .. }));
    let unknown = [&[0x80, 0, 0, 9, 7][..], &[0; 8]].concat();
    let err = read_message::<_, GuestMsg>(&mut std::io::Cursor::new(unknown)).unwrap_err();
    assert!(matches!(err, FrameError::BadData { .. }));
    let short = vec![0x80, 0, 0, 3, 1, 0, 0];
    let err = read_message::<_, GuestMsg>(&mut std::io::Cursor::new(short)).unwrap_err();
    assert!(matches!(err, FrameError::BadData { .. }));
    // A JSON-only reader refuses a binary frame; a huge binary one is too large.
    let data = encode_for(
        &HostMsg::Data {
            id: 1,
            data: Bytes(vec![1]),
        },
        2,
    );
    let err = read_frame::<_, HostMsg>(&mut std::io::Cursor::new(data)).unwrap_err();
    assert!(matches!(err, FrameError::BadData { .. }));
    let huge = (u32::MAX).to_be_bytes();
    assert!(matches!(
        decode_header(huge),
        Err(FrameError::TooLarge { .. })
    ));
}

#[test]
fn a_request_without_a_window_encodes_as_in_protocol_1() {
    let msg = HostMsg::Request {
        id: 1,
        body: Request::Ping,
        window: None,
    };
    let json = serde_json::to_string(&msg).unwrap();
    assert_eq!(json, r#"{"t":"request","id":1,"body":{"op":"ping"}}"#);
}
