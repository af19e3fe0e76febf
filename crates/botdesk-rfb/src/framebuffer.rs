//! The viewer's framebuffer: the screen's pixels in Rust, with the rectangles changed since the last flush.

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
    /// Tightly packed BGRX, the X server's own layout (blue, green, red, one unused byte): the
    /// VNC server sends it as it is, and updates are stored with a plain copy. The frame
    /// transport turns it into RGBA as it reads it, while scaling anyway.
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
        self.pixels = vec![0; width as usize * height as usize * 4];
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

    /// Writes `data` (BGRX as the screen sends it, `r.w * r.h * 4` bytes) into `r`; a rectangle
    /// outside the screen or a short buffer is refused and changes nothing.
    pub fn put_bgrx(&mut self, r: Rect, data: &[u8]) -> Result<(), String> {
        let need = r.area() as usize * 4;
        if data.len() < need {
            return Err(format!("a {}x{} rectangle came with {} bytes, not {need}", r.w, r.h, data.len()));
        }
        if !self.contains(&r) {
            return Err(format!("rectangle {r:?} is outside the {}x{} screen", self.width, self.height));
        }
        let (stride, row_bytes) = (self.width as usize * 4, r.w as usize * 4);
        for (row, src) in data[..need].chunks_exact(row_bytes.max(1)).enumerate() {
            let at = (r.y as usize + row) * stride + r.x as usize * 4;
            self.pixels[at..at + row_bytes].copy_from_slice(src);
        }
        self.mark(r);
        Ok(())
    }

    fn contains(&self, r: &Rect) -> bool {
        r.x as u32 + r.w as u32 <= self.width as u32 && r.y as u32 + r.h as u32 <= self.height as u32
    }

    /// CopyRect: the pixels of `src` move to `dst` (same size).
    pub fn copy(&mut self, dst: Rect, src: Rect) -> Result<(), String> {
        let src = Rect { w: dst.w, h: dst.h, ..src };
        if !self.contains(&dst) || !self.contains(&src) {
            return Err(format!("copy {src:?} → {dst:?} is outside the screen"));
        }
        let data = self.read(src);
        self.put_bgrx(dst, &data)
    }

    /// The stored (BGRX) bytes of `r`, which must be on the screen.
    pub fn read(&self, r: Rect) -> Vec<u8> {
        let stride = self.width as usize * 4;
        let mut out = Vec::with_capacity(r.area() as usize * 4);
        for row in 0..r.h as usize {
            let at = (r.y as usize + row) * stride + r.x as usize * 4;
            out.extend_from_slice(&self.pixels[at..at + r.w as usize * 4]);
        }
        out
    }

    /// The colour of one pixel as red, green, blue.
    pub fn rgb(&self, x: u16, y: u16) -> [u8; 3] {
        let i = (y as usize * self.width as usize + x as usize) * 4;
        [self.pixels[i + 2], self.pixels[i + 1], self.pixels[i]]
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
        fb.put_bgrx(Rect { x: 1, y: 1, w: 2, h: 1 }, &[10, 20, 30, 0, 40, 50, 60, 0]).unwrap();
        assert_eq!(fb.rgb(1, 1), [30, 20, 10], "stored as the screen sent it, read as RGB");
        assert_eq!(fb.read(Rect { x: 1, y: 1, w: 2, h: 1 }), vec![10, 20, 30, 0, 40, 50, 60, 0]);
        fb.copy(Rect { x: 0, y: 0, w: 2, h: 1 }, Rect { x: 1, y: 1, w: 2, h: 1 }).unwrap();
        assert_eq!(fb.read(Rect { x: 0, y: 0, w: 2, h: 1 }), vec![10, 20, 30, 0, 40, 50, 60, 0]);
        assert_eq!(fb.take_dirty(), vec![Rect { x: 1, y: 1, w: 2, h: 1 }, Rect { x: 0, y: 0, w: 2, h: 1 }]);
        assert!(!fb.is_dirty());
    }

    #[test]
    fn bad_rectangles_change_nothing() {
        let mut fb = Framebuffer::new(4, 3);
        fb.take_dirty();
        let before = fb.pixels.clone();
        assert!(fb.put_bgrx(Rect { x: 3, y: 0, w: 2, h: 1 }, &[0; 8]).is_err(), "outside");
        assert!(fb.put_bgrx(Rect { x: 0, y: 0, w: 2, h: 2 }, &[0; 8]).is_err(), "short data");
        assert!(fb.copy(Rect { x: 0, y: 0, w: 2, h: 1 }, Rect { x: 3, y: 2, w: 2, h: 1 }).is_err());
        assert_eq!(fb.pixels, before);
        assert!(!fb.is_dirty());
    }

    #[test]
    fn many_small_changes_merge_into_their_bounding_box() {
        let mut fb = Framebuffer::new(100, 100);
        fb.take_dirty();
        for i in 0..40u16 {
            fb.put_bgrx(Rect { x: i, y: i * 2, w: 1, h: 1 }, &[9, 9, 9, 9]).unwrap();
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
