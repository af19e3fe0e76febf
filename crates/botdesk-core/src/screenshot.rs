//! Screenshots as images: PNG (lossless, what models are sent) and JPEG, from tightly packed
//! 8-bit RGB, and back from PNG (a zoom cuts from a screenshot).

use bytes::Bytes;

use crate::ComputerError;

type Result<T> = std::result::Result<T, ComputerError>;

pub fn encode_png(width: u32, height: u32, rgb: &[u8]) -> Result<Bytes> {
    let mut out = Vec::with_capacity(rgb.len() / 4);
    let mut enc = png::Encoder::new(&mut out, width, height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.set_compression(png::Compression::Fast);
    let err = |e: png::EncodingError| ComputerError::Provider(format!("encoding the screenshot: {e}"));
    enc.write_header().map_err(err)?.write_image_data(rgb).map_err(err)?;
    Ok(Bytes::from(out))
}

/// Decodes an 8-bit RGB PNG (a screenshot [`encode_png`] made) of at most `max` pixels each way.
pub fn decode_png(data: &[u8], max: (u32, u32)) -> Result<(u32, u32, Vec<u8>)> {
    let err = |e: png::DecodingError| ComputerError::Provider(format!("decoding the screenshot: {e}"));
    let mut dec = png::Decoder::new_with_limits(std::io::Cursor::new(data), png::Limits { bytes: max.0 as usize * max.1 as usize * 4 });
    dec.set_transformations(png::Transformations::IDENTITY);
    let mut reader = dec.read_info().map_err(err)?;
    let info = reader.info();
    let (w, h) = (info.width, info.height);
    if w > max.0 || h > max.1 || info.color_type != png::ColorType::Rgb || info.bit_depth != png::BitDepth::Eight {
        return Err(ComputerError::Provider(format!("the screenshot is not an 8-bit RGB image of at most {}x{} ({w}x{h})", max.0, max.1)));
    }
    let mut rgb = vec![0; w as usize * h as usize * 3];
    reader.next_frame(&mut rgb).map_err(err)?;
    Ok((w, h, rgb))
}

/// Encodes tightly packed RGB as JPEG at `quality` (clamped to 1–100).
pub fn encode_jpeg(width: u32, height: u32, rgb: &[u8], quality: u8) -> Result<Bytes> {
    let (w, h) = (u16::try_from(width), u16::try_from(height));
    let (Ok(w), Ok(h)) = (w, h) else { return Err(ComputerError::Provider(format!("a {width}x{height} screen is too large for JPEG"))) };
    let mut out = Vec::with_capacity(rgb.len() / 10);
    jpeg_encoder::Encoder::new(&mut out, quality.clamp(1, 100))
        .encode(rgb, w, h, jpeg_encoder::ColorType::Rgb)
        .map_err(|e| ComputerError::Provider(format!("encoding the screenshot: {e}")))?;
    Ok(Bytes::from(out))
}
