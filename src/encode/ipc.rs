//! Arrow IPC stream messages written straight into the answer's buffer.
//!
//! arrow-ipc's `StreamWriter` writes every message into its own writer, from
//! which the answer then took the bytes: one more copy of every batch, and
//! a second buffer grown by reallocation as the batch was written into it
//! (`realloc` and `memmove` were 7% of the gateway's CPU on a 10M-row Arrow
//! answer). This is the same stream, from the same parts of arrow-ipc (its
//! encoder, dictionary tracker and `write_message` framing), written into a
//! buffer reserved for the whole message first.

use arrow::datatypes::Schema;
use arrow::error::ArrowError;
use arrow::ipc::writer::{
    write_message, CompressionContext, DictionaryTracker, EncodedData, IpcDataGenerator,
    IpcWriteOptions,
};
use arrow::ipc::CompressionType;
use arrow::record_batch::RecordBatch;

/// The end-of-stream marker of the Arrow IPC streaming format: the
/// continuation token and a zero length (what `StreamWriter::finish` writes).
const END_OF_STREAM: [u8; 8] = [0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0];

/// At most the bytes `write_message` adds around a message's flatbuffer and
/// body: the continuation token and length, and padding of each to the
/// alignment (at most 64).
const FRAMING: usize = 8 + 2 * 64;

pub struct IpcStream {
    data_gen: IpcDataGenerator,
    dictionaries: DictionaryTracker,
    options: IpcWriteOptions,
    compression: CompressionContext,
}

impl IpcStream {
    /// Starts a stream of `schema`, its batches' buffers compressed with
    /// `codec` if one is given: its schema message goes into `out`.
    pub fn begin(
        schema: &Schema,
        codec: Option<CompressionType>,
        out: &mut Vec<u8>,
    ) -> Result<Self, ArrowError> {
        let options = IpcWriteOptions::default().try_with_compression(codec)?;
        let data_gen = IpcDataGenerator::default();
        // As `StreamWriter`: a dictionary that changes is written again.
        let mut dictionaries = DictionaryTracker::new(false);
        let message =
            data_gen.schema_to_bytes_with_dictionary_tracker(schema, &mut dictionaries, &options);
        put(out, message, &options)?;
        Ok(Self {
            data_gen,
            dictionaries,
            options,
            compression: CompressionContext::default(),
        })
    }

    /// Appends `batch` (and any dictionaries it needs first) to `out`.
    pub fn batch(&mut self, batch: &RecordBatch, out: &mut Vec<u8>) -> Result<(), ArrowError> {
        let (dictionaries, message) = self.data_gen.encode(
            batch,
            &mut self.dictionaries,
            &self.options,
            &mut self.compression,
        )?;
        for dictionary in dictionaries {
            put(out, dictionary, &self.options)?;
        }
        put(out, message, &self.options)
    }

    /// Ends the stream.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(&END_OF_STREAM);
    }
}

/// One framed message into `out`, whose room is reserved at once.
fn put(
    out: &mut Vec<u8>,
    message: EncodedData,
    options: &IpcWriteOptions,
) -> Result<(), ArrowError> {
    out.reserve(message.ipc_message.len() + message.arrow_data.len() + FRAMING);
    write_message(&mut *out, message, options)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, DictionaryArray, Int32Array, StringArray};
    use arrow::datatypes::Int8Type;
    use arrow::ipc::writer::StreamWriter;

    use super::*;

    /// The same bytes as arrow-ipc's own `StreamWriter`, dictionaries (a
    /// DuckDB ENUM) and a dictionary that changes between batches included.
    #[test]
    fn same_bytes_as_the_stream_writer() {
        let batch = |words: &[&str]| {
            let ids: ArrayRef = Arc::new(Int32Array::from_iter(0..words.len() as i32));
            let names: ArrayRef = Arc::new(StringArray::from(words.to_vec()));
            let kinds: ArrayRef =
                Arc::new(words.iter().copied().collect::<DictionaryArray<Int8Type>>());
            RecordBatch::try_from_iter([("id", ids), ("name", names), ("kind", kinds)]).unwrap()
        };
        let batches = [batch(&["a", "b", "a"]), batch(&["c", "a"]), batch(&[])];
        let schema = batches[0].schema();

        let mut theirs = StreamWriter::try_new(Vec::new(), &schema).unwrap();
        for b in &batches {
            theirs.write(b).unwrap();
        }
        theirs.finish().unwrap();

        let mut ours = Vec::new();
        let mut stream = IpcStream::begin(&schema, None, &mut ours).unwrap();
        for b in &batches {
            stream.batch(b, &mut ours).unwrap();
        }
        stream.finish(&mut ours);

        assert_eq!(ours, theirs.into_inner().unwrap());
    }

    /// With a codec, the buffers are compressed (the stream is smaller) and
    /// arrow-ipc's reader gives the same batches back.
    #[test]
    fn compressed_buffers_read_back_the_same() {
        let ids: ArrayRef = Arc::new(Int32Array::from_iter(0..10_000));
        let names: ArrayRef = Arc::new(StringArray::from_iter_values(
            (0..10_000).map(|i| format!("row {}", i % 10)),
        ));
        let batch = RecordBatch::try_from_iter([("id", ids), ("name", names)]).unwrap();
        let write = |codec| {
            let mut out = Vec::new();
            let mut s = IpcStream::begin(&batch.schema(), codec, &mut out).unwrap();
            s.batch(&batch, &mut out).unwrap();
            s.finish(&mut out);
            out
        };
        let plain = write(None);
        for codec in [CompressionType::ZSTD, CompressionType::LZ4_FRAME] {
            let packed = write(Some(codec));
            // zstd halves it at least; LZ4 trades ratio for speed (the
            // ascending ids barely compress with it), so: smaller.
            let most = if codec == CompressionType::ZSTD {
                plain.len() / 2
            } else {
                plain.len() - 1
            };
            assert!(
                packed.len() <= most,
                "{codec:?}: {} bytes against {} plain",
                packed.len(),
                plain.len()
            );
            let read: Vec<RecordBatch> =
                arrow::ipc::reader::StreamReader::try_new(packed.as_slice(), None)
                    .unwrap()
                    .collect::<Result<_, _>>()
                    .unwrap();
            assert_eq!(read, vec![batch.clone()]);
        }
    }
}
