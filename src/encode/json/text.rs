//! Text-like values as JSON: binary as base64, and values written as a
//! JSON string of their text.

use arrow::array::{Array, AsArray};
use arrow::datatypes::DataType;
use arrow::json::writer::Encoder;
use base64::Engine as _;

/// The encoder of a binary value, as base64, for [`super::JsonRules`].
pub(super) fn binary_encoder<'a>(
    data_type: &'a DataType,
    array: &'a dyn Array,
) -> Option<Box<dyn Encoder + 'a>> {
    let enc: Box<dyn Encoder + 'a> = match data_type {
        DataType::Binary => {
            let a = array.as_binary::<i32>();
            Box::new(Base64(move |i| a.value(i)))
        }
        DataType::LargeBinary => {
            let a = array.as_binary::<i64>();
            Box::new(Base64(move |i| a.value(i)))
        }
        DataType::BinaryView => {
            let a = array.as_binary_view();
            Box::new(Base64(move |i| a.value(i)))
        }
        DataType::FixedSizeBinary(_) => {
            let a = array.as_fixed_size_binary();
            Box::new(Base64(move |i| a.value(i)))
        }
        _ => return None,
    };
    Some(enc)
}

pub(super) struct Quoted<F>(pub(super) F);
impl<F: Fn(usize) -> String> Encoder for Quoted<F> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let s = (self.0)(idx);
        serde_json::to_writer(out, &s).expect("writing to a Vec");
    }
}

struct Base64<F>(F);
impl<'b, F: Fn(usize) -> &'b [u8]> Encoder for Base64<F> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        out.push(b'"');
        let encoded = base64::engine::general_purpose::STANDARD.encode((self.0)(idx));
        out.extend_from_slice(encoded.as_bytes());
        out.push(b'"');
    }
}
