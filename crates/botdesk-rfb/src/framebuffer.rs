//! The viewer's framebuffer: RGBA pixels in Rust, with the rectangles changed since the last flush.

/// A rectangle of the framebuffer, in pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rect {
    pub x: u16,
    pub y: u16,
    pub w: u16,
    pub h: u16,
}

impl Rect {
    pub fn area(&self) -> u32 {
        self.w as u32 * self.h as u32
    }

    pub fn union(&self, o: &Rect) -> Rect {
        let (x0, y0) = (self.x.min(o.x), self.y.min(o.y));
        let x1 = (self.x as u32 + self.w as u32).max(o.x as u32 + o.w as u32);
        let y1 = (self.y as u32 + self.h as u32).max(o.y as u32 + o.h as u32);
        Rect { x: x0, y: y0, w: (x1 - x0 as u32) as u16, h: (y1 - y0 as u32) as u16 }
    }

    /// This rectangle cut to a `width`×`height` screen; None when nothing is left.
    pub fn clip(&self, width: u16, height: u16) -> Option<Rect> {
        if self.x >= width || self.y >= height || self.w == 0 || self.h == 0 {
            return None;
        }
        Some(Rect { x: self.x, y: self.y, w: self.w.min(width - self.x), h: self.h.min(height - self.y) })
    }
}

/// At most this many separate dirty rectangles; beyond it they merge into their bounding box.
const MAX_DIRTY: usize = 32;

#[derive(Debug, Clone, Default)]
pub struct Framebuffer {
    pub width: u16,
    pub height: u16,
    /// Tightly packed RGBA, alpha always 255.
    pub pixels: Vec<u8>,
    dirty: Vec<Rect>,
}

impl Framebuffer {
    pub fn new(width: u16, height: u16) -> Self {
        let mut fb = Framebuffer::default();
        fb.resize(width, height);
        fb
    }

    /// A new size: the pixels start black and the whole screen is dirty.
    pub fn resize(&mut self, width: u16, height: u16) {
        self.width = width;
        self.height = height;
        self.pixels = [0, 0, 0, 255].repeat(width as usize * height as usize);
        self.dirty = vec![Rect { x: 0, y: 0, w: width, h: height }];
    }

    fn mark(&mut self, r: Rect) {
        if let Some(last) = self.dirty.last_mut() {
            if *last == r {
                return;
            }
        }
        self.dirty.push(r);
        if self.dirty.len() > MAX_DIRTY {
            let all = self.dirty.iter().skip(1).fold(self.dirty[0], |a, b| a.union(b));
            self.dirty = vec![all];
        }
    }

    /// Writes `data` (RGBA, `r.w * r.h * 4` bytes) into `r`; a rectangle outside the screen or a
    /// short buffer is refused and changes nothing.
    pub fn put(&mut self, r: Rect, data: &[u8]) -> Result<(), String> {
        self.put_with(r, data, |px| px | 0xff00_0000)
    }

    /// Like [`Framebuffer::put`] for pixels as the screen sends them: BGRX, the X server's own
    /// layout (so the VNC server copies pixels instead of translating each one). They are stored
    /// as RGBA in the same pass.
    pub fn put_bgrx(&mut self, r: Rect, data: &[u8]) -> Result<(), String> {
        self.put_with(r, data, |px| (px & 0x0000_ff00) | (px >> 16 & 0xff) | (px & 0xff) << 16 | 0xff00_0000)
    }

    /// Stores each pixel (a little-endian u32) through `to_rgba`; alpha is always 255 after it
    /// (a 24-bit screen sends none).
    fn put_with(&mut self, r: Rect, data: &[u8], to_rgba: impl Fn(u32) -> u32) -> Result<(), String> {
        let need = r.area() as usize * 4;
        if data.len() < need {
            return Err(format!("a {}x{} rectangle came with {} bytes, not {need}", r.w, r.h, data.len()));
        }
        if r.x as u32 + r.w as u32 > self.width as u32 || r.y as u32 + r.h as u32 > self.height as u32 {
            return Err(format!("rectangle {r:?} is outside the {}x{} screen", self.width, self.height));
        }
        let stride = self.width as usize * 4;
        for row in 0..r.h as usize {
            let src = &data[row * r.w as usize * 4..(row + 1) * r.w as usize * 4];
            let at = (r.y as usize + row) * stride + r.x as usize * 4;
            let dst = &mut self.pixels[at..at + src.len()];
            for (d, s) in dst.chunks_exact_mut(4).zip(src.chunks_exact(4)) {
                d.copy_from_slice(&to_rgba(u32::from_le_bytes([s[0], s[1], s[2], s[3]])).to_le_bytes());
            }
        }
        self.mark(r);
        Ok(())
    }

    /// CopyRect: the pixels of `src` move to `dst` (same size).
    pub fn copy(&mut self, dst: Rect, src: Rect) -> Result<(), String> {
        let inside = |r: &Rect| r.x as u32 + r.w as u32 <= self.width as u32 && r.y as u32 + r.h as u32 <= self.height as u32;
        if !inside(&dst) || !inside(&Rect { w: dst.w, h: dst.h, ..src }) {
            return Err(format!("copy {src:?} → {dst:?} is outside the screen"));
        }
        let data = self.read(Rect { w: dst.w, h: dst.h, ..src });
        self.put(dst, &data)
    }

    /// The RGBA pixels of `r` (which must be on the screen).
    pub fn read(&self, r: Rect) -> Vec<u8> {
        let stride = self.width as usize * 4;
        let mut out = Vec::with_capacity(r.area() as usize * 4);
        for row in 0..r.h as usize {
            let at = (r.y as usize + row) * stride + r.x as usize * 4;
            out.extend_from_slice(&self.pixels[at..at + r.w as usize * 4]);
        }
        out
    }

    /// The rectangles changed since the last call.
    pub fn take_dirty(&mut self) -> Vec<Rect> {
        std::mem::take(&mut self.dirty)
    }

    pub fn is_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_copy_read_and_dirty_rects() {
        let mut fb = Framebuffer::new(4, 3);
        assert_eq!(fb.take_dirty(), vec![Rect { x: 0, y: 0, w: 4, h: 3 }]);
        fb.put(Rect { x: 1, y: 1, w: 2, h: 1 }, &[1, 2, 3, 0, 4, 5, 6, 0]).unwrap();
        assert_eq!(fb.read(Rect { x: 1, y: 1, w: 2, h: 1 }), vec![1, 2, 3, 255, 4, 5, 6, 255]);
        fb.copy(Rect { x: 0, y: 0, w: 2, h: 1 }, Rect { x: 1, y: 1, w: 2, h: 1 }).unwrap();
        assert_eq!(fb.read(Rect { x: 0, y: 0, w: 2, h: 1 }), vec![1, 2, 3, 255, 4, 5, 6, 255]);
        assert_eq!(fb.take_dirty(), vec![Rect { x: 1, y: 1, w: 2, h: 1 }, Rect { x: 0, y: 0, w: 2, h: 1 }]);
        assert!(!fb.is_dirty());
    }

    #[test]
    fn screen_pixels_come_as_bgrx_and_are_stored_as_rgba() {
        let mut fb = Framebuffer::new(2, 1);
        fb.put_bgrx(Rect { x: 0, y: 0, w: 2, h: 1 }, &[10, 20, 30, 0, 0, 0, 255, 7]).unwrap();
        assert_eq!(fb.pixels, vec![30, 20, 10, 255, 255, 0, 0, 255]);
        assert!(fb.put_bgrx(Rect { x: 1, y: 0, w: 2, h: 1 }, &[0; 8]).is_err(), "outside");
    }

    #[test]
    fn bad_rectangles_change_nothing() {
        let mut fb = Framebuffer::new(4, 3);
        fb.take_dirty();
        let before = fb.pixels.clone();
        assert!(fb.put(Rect { x: 3, y: 0, w: 2, h: 1 }, &[0; 8]).is_err(), "outside");
        assert!(fb.put(Rect { x: 0, y: 0, w: 2, h: 2 }, &[0; 8]).is_err(), "short data");
        assert!(fb.copy(Rect { x: 0, y: 0, w: 2, h: 1 }, Rect { x: 3, y: 2, w: 2, h: 1 }).is_err());
        assert_eq!(fb.pixels, before);
        assert!(!fb.is_dirty());
    }

    #[test]
    fn many_small_changes_merge_into_their_bounding_box() {
        let mut fb = Framebuffer::new(100, 100);
        fb.take_dirty();
        for i in 0..40u16 {
            fb.put(Rect { x: i, y: i * 2, w: 1, h: 1 }, &[9, 9, 9, 9]).unwrap();
        }
        let d = fb.take_dirty();
        assert!(d.len() <= MAX_DIRTY);
        assert!(d.iter().any(|r| r.x == 0 && r.y == 0 && r.w >= 32));
    }

    #[test]
    fn clip_and_union() {
        assert_eq!(Rect { x: 5, y: 5, w: 10, h: 10 }.clip(8, 20), Some(Rect { x: 5, y: 5, w: 3, h: 10 }));
        assert_eq!(Rect { x: 9, y: 0, w: 1, h: 1 }.clip(8, 8), None);
        assert_eq!(Rect { x: 0, y: 0, w: 1, h: 1 }.union(&Rect { x: 3, y: 4, w: 1, h: 1 }), Rect { x: 0, y: 0, w: 4, h: 5 });
    }
}
