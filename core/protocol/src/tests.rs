use super::*;

#[test]
fn round_trip_request() {
    let msg = HostMsg::Request {
        id: 7,
        body: Request::Exec(ExecRequest {
            argv: vec!["echo".into(), "hi".into()],
            ..Default::default()
        }),
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
