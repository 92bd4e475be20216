//! Runtime behaviour of `#[derive(QueueMessage)]`: keys, columns, schema, codecs.

use std::collections::BTreeMap;

use google_cloud_spanner::Decimal;
use google_cloud_spanner::types;
use spanner_queues::{
    Dialect, Error, MessageKey, QueueMessage, codec::Codec, codec::CodecError, codec::Payload,
    key::KeyError, key::KeyType, key::KeyValue, key::TypedKey, schema::Length, schema::PayloadType,
    schema::SortOrder,
};
use time::{Date, Month, OffsetDateTime};
use uuid::Uuid;

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "OrderEmails")]
struct OrderEmail {
    #[queue(key)]
    order_id: i64,
    #[queue(key, column = "EmailId")]
    id: Uuid,
    subject: String,
    body: String,
}

fn email() -> OrderEmail {
    OrderEmail {
        order_id: 42,
        id: Uuid::from_u128(0x6f1c_2a9e_0000_4000_8000_0000_0000_0001),
        subject: "Your order".into(),
        body: "has shipped".into(),
    }
}

#[test]
fn queue_name_key_and_columns() {
    assert_eq!(OrderEmail::QUEUE, "OrderEmails");
    let e = email();
    assert_eq!(e.key(), (42, e.id));
    let columns: Vec<(&str, KeyType, SortOrder)> = OrderEmail::KEY_COLUMNS
        .iter()
        .map(|c| (c.name().as_str(), c.key_type(), c.order()))
        .collect();
    assert_eq!(
        columns,
        [
            ("OrderId", KeyType::Int64, SortOrder::Asc),
            ("EmailId", KeyType::Uuid, SortOrder::Asc)
        ]
    );
    assert_eq!(OrderEmail::PAYLOAD.codec(), Codec::Json);
    assert_eq!(OrderEmail::PAYLOAD.column(), &PayloadType::Json);
    assert_eq!(
        e.message_key().to_string(),
        r#"(42, "6f1c2a9e-0000-4000-8000-000000000001")"#
    );
}

#[test]
fn schema_ddl() {
    assert_eq!(
        OrderEmail::schema()
            .create_statement(Dialect::GoogleSql)
            .expect("renders"),
        "CREATE QUEUE OrderEmails (OrderId INT64 NOT NULL, EmailId STRING(36) NOT NULL, \
         Payload JSON NOT NULL) PRIMARY KEY (OrderId, EmailId)"
    );
    assert_eq!(
        OrderEmail::schema()
            .create_statement(Dialect::PostgreSql)
            .expect("renders"),
        "CREATE QUEUE orderemails (orderid bigint NOT NULL, emailid varchar(36) NOT NULL, \
         payload jsonb NOT NULL, PRIMARY KEY (orderid, emailid))"
    );
}

#[test]
fn json_round_trip() {
    let e = email();
    let payload = e.encode_payload().expect("encodes");
    assert_eq!(
        payload,
        Payload::Json(r#"{"subject":"Your order","body":"has shipped"}"#.into())
    );
    let back = OrderEmail::decode(e.key(), payload.clone()).expect("decodes");
    assert_eq!(back, e);
    let back = OrderEmail::decode_parts(e.message_key(), payload).expect("decodes");
    assert_eq!(back, e);
}

#[test]
fn json_payload_written_by_another_client_as_string_or_bytes() {
    // Another client wrote the JSON text into a STRING or BYTES column, with its own field
    // order, an extra field, and whitespace.
    let text = r#"{ "body": "b", "extra": [1, 2], "subject": "s" }"#;
    for payload in [
        Payload::String(text.into()),
        Payload::Bytes(text.as_bytes().to_vec()),
        Payload::Json(text.into()),
    ] {
        let m = OrderEmail::decode((1, Uuid::nil()), payload).expect("decodes");
        assert_eq!((m.subject.as_str(), m.body.as_str()), ("s", "b"));
    }
    // As read from a result set: a BYTES column value arrives base64-encoded on the wire.
    let wire = Payload::Bytes(text.as_bytes().to_vec()).to_value();
    let read = Payload::from_value(wire, &types::bytes()).expect("reads");
    let m = OrderEmail::decode((1, Uuid::nil()), read).expect("decodes");
    assert_eq!(m.subject, "s");
}

#[test]
fn garbage_payload_is_a_decode_error() {
    let e = email();
    for garbage in [
        Payload::Bytes(vec![0xff, 0xfe, 0x00]),
        Payload::String("not json".into()),
        Payload::Json(r#"{"subject": 1}"#.into()),
        Payload::Json(r#"{"subject": "only one field"}"#.into()),
    ] {
        let err = OrderEmail::decode_parts(e.message_key(), garbage).expect_err("fails");
        match &err {
            Error::Decode {
                queue, key, source, ..
            } => {
                assert_eq!(queue, "OrderEmails");
                assert_eq!(key, &e.message_key());
                assert!(matches!(source, CodecError::Json(_)), "{source:?}");
            }
            other => panic!("expected Decode, got {other:?}"),
        }
        assert_eq!(
            err.classification(),
            spanner_queues::error::Classification::Permanent
        );
    }
}

#[test]
fn wrong_key_shape_is_a_decode_error() {
    let payload = email().encode_payload().expect("encodes");
    let key = MessageKey::new(vec![KeyValue::Int64(1)]);
    let err = OrderEmail::decode_parts(key, payload).expect_err("wrong arity");
    assert!(
        matches!(
            err,
            Error::Decode {
                source: CodecError::Key(KeyError::Arity {
                    expected: 2,
                    found: 1,
                    ..
                }),
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn typed_key_and_message_key() {
    let e = email();
    let dynamic = e.key().to_message_key();
    assert_eq!(
        dynamic.parts(),
        [KeyValue::Int64(42), KeyValue::Uuid(e.id)].as_slice()
    );
    let typed = <OrderEmail as QueueMessage>::Key::from_message_key(dynamic).expect("same shape");
    assert_eq!(typed, e.key());
    let swapped = MessageKey::new(vec![KeyValue::Uuid(e.id), KeyValue::Int64(42)]);
    assert!(matches!(
        <OrderEmail as QueueMessage>::Key::from_message_key(swapped),
        Err(KeyError::TypeMismatch {
            position: 0,
            expected: KeyType::Int64,
            found: KeyType::Uuid,
            ..
        })
    ));
}

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "Blobs", payload = "bytes")]
struct Blob {
    #[queue(key)]
    id: String,
    data: Vec<u8>,
}

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "Notes", payload = "string")]
struct Note {
    #[queue(key, desc)]
    at: OffsetDateTime,
    text: String,
}

#[test]
fn bytes_codec() {
    let b = Blob {
        id: "a".into(),
        data: vec![0, 1, 2, 255],
    };
    let payload = b.encode_payload().expect("encodes");
    assert_eq!(payload, Payload::Bytes(vec![0, 1, 2, 255]));
    assert_eq!(payload.len(), 4);
    assert_eq!(Blob::decode(b.key(), payload).expect("decodes"), b);
    // Bytes written into a STRING column by another client decode as their UTF-8 bytes.
    let from_string = Blob::decode("a".into(), Payload::String("hi".into())).expect("decodes");
    assert_eq!(from_string.data, b"hi");
    assert_eq!(
        Blob::schema()
            .create_statement(Dialect::GoogleSql)
            .expect("renders"),
        "CREATE QUEUE Blobs (Id STRING(MAX) NOT NULL, Payload BYTES(MAX) NOT NULL) PRIMARY KEY (Id)"
    );
}

#[test]
fn string_codec_and_desc_key() {
    let n = Note {
        at: OffsetDateTime::UNIX_EPOCH,
        text: "héllo".into(),
    };
    let payload = n.encode_payload().expect("encodes");
    assert_eq!(payload, Payload::String("héllo".into()));
    assert_eq!(payload.len(), 6);
    assert_eq!(Note::decode(n.key(), payload).expect("decodes"), n);
    let utf8 = Note::decode(n.at, Payload::Bytes("ok".into())).expect("UTF-8 bytes decode");
    assert_eq!(utf8.text, "ok");
    let err = Note::decode(n.at, Payload::Bytes(vec![0xff])).expect_err("not UTF-8");
    assert!(matches!(err, CodecError::Utf8(_)));
    assert_eq!(
        Note::schema()
            .create_statement(Dialect::GoogleSql)
            .expect("renders"),
        "CREATE QUEUE Notes (`At` TIMESTAMP NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (`At` DESC)"
    );
}

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "TextJson", payload_type = "STRING")]
struct TextJson {
    #[queue(key)]
    id: i64,
    n: u32,
}

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "BytesJson", payload = "json", payload_type = "BYTES")]
struct BytesJson {
    #[queue(key)]
    id: i64,
    n: u32,
}

#[test]
fn json_into_string_and_bytes_columns() {
    let t = TextJson { id: 1, n: 7 };
    let p = t.encode_payload().expect("encodes");
    assert_eq!(p, Payload::String(r#"{"n":7}"#.into()));
    assert_eq!(TextJson::decode(1, p).expect("decodes"), t);
    assert_eq!(
        TextJson::PAYLOAD.column(),
        &PayloadType::String(Length::Max)
    );

    let b = BytesJson { id: 1, n: 7 };
    let p = b.encode_payload().expect("encodes");
    assert_eq!(p, Payload::Bytes(br#"{"n":7}"#.to_vec()));
    assert_eq!(BytesJson::decode(1, p).expect("decodes"), b);
    assert!(
        BytesJson::schema()
            .create_statement(Dialect::GoogleSql)
            .expect("renders")
            .contains("Payload BYTES(MAX) NOT NULL")
    );
}

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "AllKeys")]
struct AllKeys {
    #[queue(key)]
    a: String,
    #[queue(key)]
    b: i64,
    #[queue(key)]
    c: bool,
    #[queue(key)]
    d: Vec<u8>,
    #[queue(key)]
    e: Uuid,
    #[queue(key)]
    f: OffsetDateTime,
    #[queue(key)]
    g: Date,
    #[queue(key)]
    h: Decimal,
}

#[test]
fn every_key_type() {
    let m = AllKeys {
        a: "x".into(),
        b: -1,
        c: true,
        d: vec![9],
        e: Uuid::nil(),
        f: OffsetDateTime::UNIX_EPOCH,
        g: Date::from_calendar_date(2026, Month::November, 30).expect("date"),
        h: "1.25".parse().expect("decimal"),
    };
    assert_eq!(
        AllKeys::schema()
            .create_statement(Dialect::GoogleSql)
            .expect("renders"),
        "CREATE QUEUE AllKeys (A STRING(MAX) NOT NULL, B INT64 NOT NULL, C BOOL NOT NULL, \
         D BYTES(MAX) NOT NULL, E STRING(36) NOT NULL, F TIMESTAMP NOT NULL, G DATE NOT NULL, \
         H NUMERIC NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (A, B, C, D, E, F, G, H)"
    );
    let key = m.message_key();
    assert_eq!(
        key.to_string(),
        r#"("x", -1, true, b"\t", "00000000-0000-0000-0000-000000000000", 1970-01-01T00:00:00.000000000Z, 2026-11-30, 1.25)"#
    );
    // Key values survive the trip through the official client's values, as a receive reads them.
    let read_back: MessageKey = AllKeys::KEY_COLUMNS
        .iter()
        .zip(key.parts())
        .map(|(column, value)| {
            let column_type = match column.key_type() {
                KeyType::Uuid => types::string(),
                other => other.param_type(),
            };
            KeyValue::from_value(column.key_type(), &value.to_value(), &column_type)
                .expect("reads back")
        })
        .collect();
    let payload = m.encode_payload().expect("encodes");
    assert_eq!(payload, Payload::Json("{}".into()));
    assert_eq!(
        AllKeys::decode_parts(read_back, payload).expect("decodes"),
        m
    );
}

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "Profiles")]
#[serde(rename_all = "camelCase")]
struct Profile {
    #[queue(key)]
    user_id: i64,
    first_name: String,
    #[serde(rename = "mail", alias = "email")]
    email_address: String,
    #[serde(default)]
    visits: u32,
    nickname: Option<String>,
    tags: BTreeMap<String, u8>,
}

#[test]
fn serde_attributes_are_honoured() {
    let p = Profile {
        user_id: 1,
        first_name: "Ada".into(),
        email_address: "ada@example.com".into(),
        visits: 3,
        nickname: None,
        tags: BTreeMap::from([("a".into(), 1)]),
    };
    let payload = p.encode_payload().expect("encodes");
    assert_eq!(
        payload.as_bytes(),
        br#"{"firstName":"Ada","mail":"ada@example.com","visits":3,"nickname":null,"tags":{"a":1}}"#
    );
    assert_eq!(Profile::decode(1, payload).expect("decodes"), p);
    // An older or foreign writer: alias used, `visits` and `nickname` missing.
    let foreign = Payload::Json(r#"{"firstName":"Bob","email":"b@x","tags":{}}"#.into());
    let decoded = Profile::decode(2, foreign).expect("decodes");
    assert_eq!(decoded.email_address, "b@x");
    assert_eq!(decoded.visits, 0);
    assert_eq!(decoded.nickname, None);
}

#[derive(QueueMessage, Debug)]
#[queue(name = "Bad")]
struct Unencodable {
    #[queue(key)]
    id: i64,
    map: BTreeMap<(u8, u8), u8>,
}

#[test]
fn encode_failure_is_typed() {
    let m = Unencodable {
        id: 5,
        map: BTreeMap::from([((1, 2), 3)]),
    };
    assert!(matches!(m.encode_payload(), Err(CodecError::Json(_))));
    let err = m.encode().expect_err("fails");
    assert!(
        matches!(&err, Error::Encode { queue, key, .. } if queue == "Bad" && key.to_string() == "(5)"),
        "{err:?}"
    );
    assert_eq!(
        err.code(),
        Some(spanner_queues::error::Code::InvalidArgument)
    );
}

mod reexported {
    pub(crate) use spanner_queues::*;
}

#[derive(reexported::QueueMessage, Debug, PartialEq)]
#[queue(name = "ViaReexport", crate = "crate::reexported")]
struct ViaReexport {
    #[queue(key)]
    id: i64,
    v: String,
}

#[test]
fn crate_path_override() {
    let m = ViaReexport {
        id: 1,
        v: "x".into(),
    };
    let p = m.encode_payload().expect("encodes");
    assert_eq!(ViaReexport::decode(1, p).expect("decodes"), m);
}

#[test]
fn renaming_the_type_keeps_the_queue() {
    type Renamed = OrderEmail;
    assert_eq!(Renamed::QUEUE, OrderEmail::QUEUE);
    assert_eq!(Renamed::schema(), OrderEmail::schema());
}

#[cfg(feature = "protobuf")]
mod proto {
    use super::*;

    #[derive(QueueMessage, Debug, Clone, PartialEq)]
    #[queue(name = "Stamps", payload = "proto")]
    struct Stamp {
        #[queue(key)]
        id: i64,
        at: prost_types::Timestamp,
    }

    #[test]
    fn proto_codec() {
        let s = Stamp {
            id: 1,
            at: prost_types::Timestamp {
                seconds: 5,
                nanos: 6,
            },
        };
        let payload = s.encode_payload().expect("encodes");
        assert!(matches!(payload, Payload::Bytes(_)));
        assert_eq!(Stamp::decode(1, payload).expect("decodes"), s);
        assert!(matches!(
            Stamp::decode(1, Payload::String("x".into())),
            Err(CodecError::PayloadKind { .. })
        ));
        assert!(
            Stamp::schema()
                .create_statement(Dialect::GoogleSql)
                .expect("renders")
                .contains("Payload BYTES(MAX) NOT NULL")
        );
    }
}

/// The derive's compile-time identifier rules and `spanner_queues::ident` agree on every case.
#[test]
fn identifier_rules_do_not_drift() {
    use spanner_queues::ident::{IdentifierKind, check_identifier};

    fn runtime(kind: IdentifierKind, name: &str) -> &'static str {
        match check_identifier(kind, name) {
            Ok(()) => "ok",
            Err(problem) => problem.code(),
        }
    }

    macro_rules! agree {
        ($($kind:ident $ident_kind:ident $name:literal),* $(,)?) => {
            $(
                assert_eq!(
                    spanner_queues::__private::__identifier_problem!($kind $name),
                    runtime(IdentifierKind::$ident_kind, $name),
                    "{} {:?}", stringify!($kind), $name
                );
            )*
        };
    }

    agree!(
        queue Queue "OrderEmails",
        queue Queue "Q1",
        queue Queue "a",
        queue Queue "",
        queue Queue "1abc",
        queue Queue "_abc",
        queue Queue "a-b",
        queue Queue "a b",
        queue Queue "abcé",
        queue Queue "Ünïcode",
        queue Queue "Payload",
        queue Queue "SpannerQueue",
        queue Queue "Select",
        queue Queue "qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq",
        queue Queue "qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq",
        column Column "OrderId",
        column Column "Payload",
        column Column "PAYLOAD",
        column Column "DeliverTime",
        column Column "deliver_time",
        column Column "SpannerLeaseToken",
        column Column "spanner_x",
        column Column "Spanne",
        column Column "Order",
        column Column "",
        column Column "9",
        column Column "a.b",
        column Column "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc",
        column Column "ccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc",
    );
}

/// A hand-written implementation, for types the derive does not fit.
struct Manual {
    id: String,
    raw: Vec<u8>,
}

impl QueueMessage for Manual {
    type Key = String;
    const QUEUE: spanner_queues::ident::QueueName =
        spanner_queues::ident::QueueName::from_static("Manual");
    const KEY_COLUMNS: &'static [spanner_queues::key::KeyColumn] =
        &[spanner_queues::key::KeyColumn::new(
            spanner_queues::ident::ColumnName::from_static("ManualId"),
            KeyType::String,
        )];
    const PAYLOAD: spanner_queues::codec::PayloadSpec = spanner_queues::codec::PayloadSpec::bytes();

    fn key(&self) -> String {
        self.id.clone()
    }

    fn encode_payload(&self) -> Result<Payload, CodecError> {
        Ok(spanner_queues::codec::encode_bytes(&self.raw))
    }

    fn decode(key: String, payload: Payload) -> Result<Self, CodecError> {
        Ok(Self {
            id: key,
            raw: spanner_queues::codec::decode_bytes(payload)?,
        })
    }
}

#[test]
fn hand_written_implementation() {
    let m = Manual {
        id: "m1".into(),
        raw: vec![7],
    };
    let back =
        Manual::decode_parts(m.message_key(), m.encode().expect("encodes")).expect("decodes");
    assert_eq!(
        (back.id.as_str(), back.raw.as_slice()),
        ("m1", [7].as_slice())
    );
    assert_eq!(
        Manual::schema()
            .create_statement(Dialect::GoogleSql)
            .expect("renders"),
        "CREATE QUEUE Manual (ManualId STRING(MAX) NOT NULL, Payload BYTES(MAX) NOT NULL) PRIMARY KEY (ManualId)"
    );
}
