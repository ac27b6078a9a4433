//! Mesh geometry: named dimensions over a strided set of base ranks.
//!
//! A mesh of procs or actors is a dense array of `base` ranks (0..n, in
//! row-major order of the shape it was created with). A [`Shape`] is a view
//! onto those ranks: named dimensions with sizes, an offset and strides, so
//! slicing is arithmetic on the view and never copies or renumbers anything.

use std::fmt;

use crate::limits;

/// An error in a geometric operation; the message names the dimension and
/// the valid range so a user can fix the call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct GeometryError(pub String);

impl From<GeometryError> for crate::error::Error {
    fn from(e: GeometryError) -> Self {
        crate::error::Error::invalid(e.0)
    }
}

fn err<T>(msg: impl Into<String>) -> Result<T, GeometryError> {
    Err(GeometryError(msg.into()))
}

/// Check a dimension name (see [`limits::check_name`]).
fn check_label(label: &str) -> Result<(), GeometryError> {
    if label.is_empty() {
        return err("dimension names must not be empty");
    }
    limits::check_name("dimension name", label).map_err(|e| GeometryError(e.message))
}

/// Labels and sizes of a mesh, plus where its points sit among the base ranks.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Shape {
    labels: Vec<String>,
    offset: usize,
    sizes: Vec<usize>,
    strides: Vec<usize>,
}

impl Shape {
    /// A dense row-major shape, e.g. `[("hosts", 2), ("gpus", 4)]`.
    pub fn new(dims: &[(&str, usize)]) -> Result<Shape, GeometryError> {
        let labels: Vec<String> = dims.iter().map(|(l, _)| l.to_string()).collect();
        let sizes: Vec<usize> = dims.iter().map(|(_, s)| *s).collect();
        Shape::dense(labels, sizes)
    }

    /// A dense row-major shape from parallel label and size lists.
    pub fn dense(labels: Vec<String>, sizes: Vec<usize>) -> Result<Shape, GeometryError> {
        if labels.len() != sizes.len() {
            return err(format!("{} labels but {} sizes", labels.len(), sizes.len()));
        }
        for (i, l) in labels.iter().enumerate() {
            check_label(l)?;
            if labels[..i].contains(l) {
                return err(format!("dimension '{l}' appears twice"));
            }
        }
        let mut strides = vec![0; sizes.len()];
        let mut acc = 1usize;
        for i in (0..sizes.len()).rev() {
            strides[i] = acc;
            acc = acc
                .checked_mul(sizes[i].max(1))
                .ok_or_else(|| GeometryError("mesh too large".into()))?;
        }
        Ok(Shape {
            labels,
            offset: 0,
            sizes,
            strides,
        })
    }

    /// A shape from raw parts, as decoded from the wire; checked for
    /// consistency so a malformed peer cannot make us index out of bounds
    /// (ranks are still checked against the base list by the user of them).
    pub fn from_parts(
        labels: Vec<String>,
        offset: usize,
        sizes: Vec<usize>,
        strides: Vec<usize>,
    ) -> Result<Shape, GeometryError> {
        if labels.len() != sizes.len() || sizes.len() != strides.len() {
            return err("shape has mismatched labels, sizes and strides");
        }
        if sizes
            .iter()
            .try_fold(1usize, |a, s| a.checked_mul(*s))
            .is_none()
        {
            return err("shape has more points than can be counted");
        }
        let mut max = offset;
        for (s, st) in sizes.iter().zip(&strides) {
            if *s > 0 {
                max = (s - 1)
                    .checked_mul(*st)
                    .and_then(|x| x.checked_add(max))
                    .ok_or_else(|| GeometryError("shape overflows".into()))?;
            }
        }
        Ok(Shape {
            labels,
            offset,
            sizes,
            strides,
        })
    }

    /// The dimension names, outermost first.
    pub fn labels(&self) -> &[String] {
        &self.labels
    }
    /// The size of each dimension.
    pub fn sizes(&self) -> &[usize] {
        &self.sizes
    }
    /// The stride of each dimension, in base ranks.
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }
    /// The base rank of the view's first point.
    pub fn offset(&self) -> usize {
        self.offset
    }
    /// The number of dimensions.
    pub fn ndim(&self) -> usize {
        self.sizes.len()
    }

    /// Number of points in the view.
    pub fn len(&self) -> usize {
        self.sizes.iter().product()
    }

    /// Whether the view has no points.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Size of dimension `label`.
    pub fn size(&self, label: &str) -> Result<usize, GeometryError> {
        Ok(self.sizes[self.dim(label)?])
    }

    fn dim(&self, label: &str) -> Result<usize, GeometryError> {
        self.labels.iter().position(|l| l == label).ok_or_else(|| {
            GeometryError(format!(
                "no dimension '{label}' in mesh with dimensions {}",
                self.dims_text()
            ))
        })
    }

    fn dims_text(&self) -> String {
        let parts: Vec<String> = self
            .labels
            .iter()
            .zip(&self.sizes)
            .map(|(l, s)| format!("'{l}': {s}"))
            .collect();
        format!("{{{}}}", parts.join(", "))
    }

    /// Fix dimension `label` at `index`, removing the dimension.
    pub fn at(&self, label: &str, index: usize) -> Result<Shape, GeometryError> {
        let d = self.dim(label)?;
        if index >= self.sizes[d] {
            return err(format!(
                "index {index} out of range for dimension '{label}' of size {} (valid: 0..{})",
                self.sizes[d], self.sizes[d]
            ));
        }
        let mut s = self.clone();
        s.offset += index * s.strides[d];
        s.labels.remove(d);
        s.sizes.remove(d);
        s.strides.remove(d);
        Ok(s)
    }

    /// Keep dimension `label`, narrowed to `start..stop` by `step`, with
    /// Python semantics: negative `start`/`stop` count from the end, `None`
    /// means the natural bound, bounds are clamped, `step` must be positive.
    pub fn select(
        &self,
        label: &str,
        start: Option<i64>,
        stop: Option<i64>,
        step: i64,
    ) -> Result<Shape, GeometryError> {
        let d = self.dim(label)?;
        if step <= 0 {
            return err(format!(
                "slice step for dimension '{label}' must be positive, got {step}"
            ));
        }
        let n = self.sizes[d] as i64;
        let norm = |v: Option<i64>, default: i64| -> i64 {
            match v {
                None => default,
                Some(v) if v < 0 => (v + n).max(0),
                Some(v) => v.min(n),
            }
        };
        let b = norm(start, 0);
        let e = norm(stop, n);
        let count = if e > b {
            ((e - b) + step - 1) / step
        } else {
            0
        } as usize;
        let mut s = self.clone();
        s.offset += b as usize * s.strides[d];
        s.sizes[d] = count;
        s.strides[d] *= step as usize;
        Ok(s)
    }

    /// Merge every dimension into one dimension `label` (row-major order, so
    /// rank `r` of the view stays rank `r`). Possible when the points of the
    /// view are evenly spaced among the base ranks: every dimension's stride
    /// equals the next (non-unit) dimension's stride times its size. That
    /// holds for any dense mesh, for a fixed index (`at`) of one, and for a
    /// view narrowed only in its outermost dimension or strided in its only
    /// remaining dimension; it fails for e.g. `gpus=1..3` of `{hosts: 2,
    /// gpus: 4}`, which would need two strides. (Upstream Monarch requires
    /// the dense strides; this accepts a superset: one common stride.)
    pub fn flatten(&self, label: &str) -> Result<Shape, GeometryError> {
        check_label(label)?;
        let n = self.len();
        // The stride of the flattened dimension: that of the innermost
        // dimension with more than one point (1 if there is none).
        let mut stride = 1;
        let mut inner: Option<usize> = None;
        if n > 1 {
            for d in (0..self.ndim()).rev() {
                if self.sizes[d] == 1 {
                    continue;
                }
                match inner {
                    None => stride = self.strides[d],
                    Some(i) => {
                        let want = self.strides[i] * self.sizes[i];
                        if self.strides[d] != want {
                            return err(format!(
                                "cannot flatten mesh {} into '{label}': its points are not evenly \
                                 spaced (dimension '{}' has stride {} where a single stride needs {want}); \
                                 flatten before slicing, or slice only the outermost dimension",
                                self.dims_text(),
                                self.labels[d],
                                self.strides[d],
                            ));
                        }
                    }
                }
                inner = Some(d);
            }
        }
        Ok(Shape {
            labels: vec![label.to_string()],
            offset: self.offset,
            sizes: vec![n],
            strides: vec![stride],
        })
    }

    /// Rename dimensions, all at once (so `[("a", "b"), ("b", "a")]` swaps
    /// them); dimensions not mentioned keep their names.
    pub fn rename(&self, pairs: &[(&str, &str)]) -> Result<Shape, GeometryError> {
        let mut s = self.clone();
        let mut seen: Vec<usize> = Vec::new();
        for (from, to) in pairs {
            let d = self.dim(from)?;
            if seen.contains(&d) {
                return err(format!("dimension '{from}' is renamed twice"));
            }
            if to.is_empty() {
                return err(format!("new name of dimension '{from}' must not be empty"));
            }
            check_label(to)?;
            seen.push(d);
            s.labels[d] = to.to_string();
        }
        for (i, l) in s.labels.iter().enumerate() {
            if s.labels[..i].contains(l) {
                return err(format!(
                    "renaming dimensions of {} gives dimension '{l}' twice",
                    self.dims_text()
                ));
            }
        }
        Ok(s)
    }

    /// Split dimension `label` into `parts` (outermost first), in place. A
    /// part's size may be `None` (at most one): it is inferred from the
    /// others. The sizes must multiply to the dimension's size. The new
    /// names must not clash with the other dimensions (reusing `label`
    /// itself is fine). Works on any view: strides are scaled, not reset.
    pub fn split(
        &self,
        label: &str,
        parts: &[(&str, Option<usize>)],
    ) -> Result<Shape, GeometryError> {
        let d = self.dim(label)?;
        if parts.is_empty() {
            return err(format!(
                "split of dimension '{label}' needs at least one new dimension"
            ));
        }
        let size = self.sizes[d];
        let mut known = 1usize;
        let mut unknown: Option<usize> = None;
        for (i, (name, sz)) in parts.iter().enumerate() {
            check_label(name)?;
            if parts[..i].iter().any(|(n, _)| n == name)
                || self
                    .labels
                    .iter()
                    .enumerate()
                    .any(|(j, l)| j != d && l == name)
            {
                return err(format!(
                    "splitting dimension '{label}' of {} gives dimension '{name}' twice",
                    self.dims_text()
                ));
            }
            match sz {
                Some(0) => return err(format!("size of new dimension '{name}' must be positive")),
                Some(k) => {
                    known = known
                        .checked_mul(*k)
                        .ok_or_else(|| GeometryError("split sizes overflow".into()))?
                }
                None if unknown.is_some() => {
                    return err(format!(
                        "cannot infer the sizes of both '{}' and '{name}' when splitting dimension \
                         '{label}': give at least one of them",
                        parts[unknown.unwrap_or(0)].0
                    ))
                }
                None => unknown = Some(i),
            }
        }
        let describe = || {
            let p: Vec<String> = parts
                .iter()
                .map(|(n, s)| match s {
                    Some(s) => format!("'{n}': {s}"),
                    None => format!("'{n}': ?"),
                })
                .collect();
            format!("{{{}}}", p.join(", "))
        };
        let mut sizes: Vec<usize> = parts.iter().map(|(_, s)| s.unwrap_or(0)).collect();
        match unknown {
            Some(u) if size.is_multiple_of(known) => sizes[u] = size / known,
            None if known == size => {}
            _ => {
                return err(format!(
                    "dimension '{label}' of size {size} cannot be split into {}: the sizes must \
                     multiply to {size}",
                    describe()
                ))
            }
        }
        let mut strides = vec![0; parts.len()];
        let mut acc = self.strides[d];
        for i in (0..parts.len()).rev() {
            strides[i] = acc;
            acc = acc.saturating_mul(sizes[i].max(1));
        }
        let mut s = self.clone();
        s.labels
            .splice(d..=d, parts.iter().map(|(n, _)| n.to_string()));
        s.sizes.splice(d..=d, sizes);
        s.strides.splice(d..=d, strides);
        Ok(s)
    }

    /// Base rank of the point at `coords` (one coordinate per dimension).
    pub fn base_rank_of(&self, coords: &[usize]) -> Result<usize, GeometryError> {
        if coords.len() != self.ndim() {
            return err(format!(
                "expected {} coordinates, got {}",
                self.ndim(),
                coords.len()
            ));
        }
        let mut r = self.offset;
        for (i, c) in coords.iter().enumerate() {
            if *c >= self.sizes[i] {
                return err(format!(
                    "coordinate {c} out of range for dimension '{}' of size {}",
                    self.labels[i], self.sizes[i]
                ));
            }
            r += c * self.strides[i];
        }
        Ok(r)
    }

    /// Coordinates of the point whose rank in this view is `rank`.
    pub fn coords_of(&self, rank: usize) -> Result<Vec<usize>, GeometryError> {
        if rank >= self.len() {
            return err(format!(
                "rank {rank} out of range for mesh of {} points",
                self.len()
            ));
        }
        let mut coords = vec![0; self.ndim()];
        let mut rem = rank;
        for i in (0..self.ndim()).rev() {
            coords[i] = rem % self.sizes[i];
            rem /= self.sizes[i];
        }
        Ok(coords)
    }

    /// Base rank of the point whose rank in this view is `rank`.
    pub fn base_rank(&self, rank: usize) -> Result<usize, GeometryError> {
        let coords = self.coords_of(rank)?;
        self.base_rank_of(&coords)
    }

    /// Base ranks of every point, in row-major order of the view.
    pub fn base_ranks(&self) -> BaseRanks<'_> {
        BaseRanks {
            shape: self,
            coords: vec![0; self.ndim()],
            remaining: self.len(),
            current: self.offset,
        }
    }

    /// The largest base rank this view touches (None if empty).
    pub fn max_base_rank(&self) -> Option<usize> {
        if self.is_empty() {
            return None;
        }
        Some(
            self.offset
                + self
                    .sizes
                    .iter()
                    .zip(&self.strides)
                    .map(|(s, st)| (s - 1) * st)
                    .sum::<usize>(),
        )
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.dims_text())
    }
}

/// Iterator over the base ranks of a view, in row-major order.
pub struct BaseRanks<'a> {
    shape: &'a Shape,
    coords: Vec<usize>,
    remaining: usize,
    current: usize,
}

impl Iterator for BaseRanks<'_> {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        if self.remaining == 0 {
            return None;
        }
        let out = self.current;
        self.remaining -= 1;
        // Advance like an odometer, last dimension fastest.
        for i in (0..self.coords.len()).rev() {
            self.coords[i] += 1;
            self.current += self.shape.strides[i];
            if self.coords[i] < self.shape.sizes[i] {
                break;
            }
            self.current -= self.coords[i] * self.shape.strides[i];
            self.coords[i] = 0;
        }
        Some(out)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hg() -> Shape {
        Shape::new(&[("hosts", 2), ("gpus", 4)]).unwrap()
    }

    #[test]
    fn dense_ranks_are_row_major() {
        let s = hg();
        assert_eq!(s.len(), 8);
        assert_eq!(s.strides(), &[4, 1]);
        assert_eq!(
            s.base_ranks().collect::<Vec<_>>(),
            (0..8).collect::<Vec<_>>()
        );
        assert_eq!(s.coords_of(6).unwrap(), vec![1, 2]);
        assert_eq!(s.base_rank_of(&[1, 2]).unwrap(), 6);
    }

    #[test]
    fn index_removes_dimension() {
        let s = hg().at("gpus", 1).unwrap();
        assert_eq!(s.labels(), &["hosts".to_string()]);
        assert_eq!(s.base_ranks().collect::<Vec<_>>(), vec![1, 5]);
        let s = hg().at("hosts", 1).unwrap();
        assert_eq!(s.base_ranks().collect::<Vec<_>>(), vec![4, 5, 6, 7]);
    }

    #[test]
    fn range_keeps_dimension_and_composes() {
        let s = hg().select("gpus", Some(1), None, 2).unwrap();
        assert_eq!(s.sizes(), &[2, 2]);
        assert_eq!(s.base_ranks().collect::<Vec<_>>(), vec![1, 3, 5, 7]);
        let t = s.select("gpus", Some(1), Some(2), 1).unwrap();
        assert_eq!(t.base_ranks().collect::<Vec<_>>(), vec![3, 7]);
        let u = t.at("hosts", 1).unwrap();
        assert_eq!(u.base_ranks().collect::<Vec<_>>(), vec![7]);
        assert_eq!(u.base_rank(0).unwrap(), 7);
    }

    #[test]
    fn python_slice_semantics() {
        let s = Shape::new(&[("x", 10)]).unwrap();
        let r = |a, b, c| -> Vec<usize> { s.select("x", a, b, c).unwrap().base_ranks().collect() };
        assert_eq!(r(Some(-3), None, 1), vec![7, 8, 9]);
        assert_eq!(r(None, Some(-8), 1), vec![0, 1]);
        assert_eq!(r(Some(8), Some(100), 1), vec![8, 9]);
        assert_eq!(r(Some(5), Some(2), 1), Vec::<usize>::new());
        assert_eq!(r(None, None, 3), vec![0, 3, 6, 9]);
    }

    #[test]
    fn errors_name_dimension_and_range() {
        let e = hg().at("gpu", 0).unwrap_err().0;
        assert!(
            e.contains("no dimension 'gpu'") && e.contains("'gpus': 4"),
            "{e}"
        );
        let e = hg().at("gpus", 4).unwrap_err().0;
        assert!(
            e.contains("index 4") && e.contains("'gpus'") && e.contains("0..4"),
            "{e}"
        );
        let e = hg().select("gpus", None, None, 0).unwrap_err().0;
        assert!(e.contains("step") && e.contains("'gpus'"), "{e}");
        assert!(hg().coords_of(8).is_err());
        assert!(Shape::new(&[("a", 1), ("a", 2)]).is_err());
    }

    fn ranks(s: &Shape) -> Vec<usize> {
        s.base_ranks().collect()
    }

    #[test]
    fn flatten_dense_and_evenly_spaced_views() {
        let f = hg().flatten("all").unwrap();
        assert_eq!(f.labels(), &["all".to_string()]);
        assert_eq!(f.sizes(), &[8]);
        assert_eq!(ranks(&f), (0..8).collect::<Vec<_>>());
        // A fixed row keeps its offset.
        let f = hg().at("hosts", 1).unwrap().flatten("g").unwrap();
        assert_eq!(ranks(&f), vec![4, 5, 6, 7]);
        // Narrowing only the outermost dimension stays evenly spaced.
        let f = Shape::new(&[("a", 3), ("b", 2)])
            .unwrap()
            .select("a", Some(1), None, 1)
            .unwrap()
            .flatten("x")
            .unwrap();
        assert_eq!(ranks(&f), vec![2, 3, 4, 5]);
        // A strided single dimension keeps its stride.
        let f = hg()
            .at("hosts", 0)
            .unwrap()
            .select("gpus", None, None, 2)
            .unwrap()
            .flatten("x")
            .unwrap();
        assert_eq!((f.sizes(), f.strides()), (&[2][..], &[2][..]));
        assert_eq!(ranks(&f), vec![0, 2]);
        // A column of a 2-d mesh is spaced by the row length.
        let f = hg()
            .select("gpus", Some(3), None, 1)
            .unwrap()
            .flatten("x")
            .unwrap();
        assert_eq!(ranks(&f), vec![3, 7]);
        // Unit dimensions do not matter; no dimensions gives one point.
        let f = Shape::new(&[("a", 1), ("b", 3), ("c", 1)])
            .unwrap()
            .flatten("x")
            .unwrap();
        assert_eq!(ranks(&f), vec![0, 1, 2]);
        let f = Shape::new(&[]).unwrap().flatten("x").unwrap();
        assert_eq!((f.sizes(), ranks(&f)), (&[1][..], vec![0]));
        // Flattened ranks equal the view's ranks in row-major order.
        let v = hg().select("hosts", Some(1), None, 1).unwrap();
        assert_eq!(ranks(&v.flatten("x").unwrap()), ranks(&v));
    }

    #[test]
    fn flatten_rejects_uneven_views() {
        let v = hg().select("gpus", Some(1), Some(3), 1).unwrap();
        let e = v.flatten("x").unwrap_err().0;
        assert!(
            e.contains("cannot flatten") && e.contains("'hosts'") && e.contains("stride 4"),
            "{e}"
        );
        assert!(hg().flatten("").is_err());
    }

    #[test]
    fn rename_is_simultaneous() {
        let s = hg().rename(&[("hosts", "dp"), ("gpus", "tp")]).unwrap();
        assert_eq!(s.labels(), &["dp".to_string(), "tp".to_string()]);
        assert_eq!(ranks(&s), ranks(&hg()));
        let s = hg()
            .rename(&[("hosts", "gpus"), ("gpus", "hosts")])
            .unwrap();
        assert_eq!(s.labels(), &["gpus".to_string(), "hosts".to_string()]);
        assert_eq!(s.size("hosts").unwrap(), 4);
        let e = hg().rename(&[("gpu", "x")]).unwrap_err().0;
        assert!(e.contains("no dimension 'gpu'"), "{e}");
        let e = hg().rename(&[("hosts", "gpus")]).unwrap_err().0;
        assert!(e.contains("'gpus' twice"), "{e}");
        assert!(hg().rename(&[("hosts", "a"), ("hosts", "b")]).is_err());
        assert!(hg().rename(&[("hosts", "")]).is_err());
    }

    #[test]
    fn split_infers_and_keeps_ranks() {
        let s = hg()
            .split("gpus", &[("node", None), ("local", Some(2))])
            .unwrap();
        assert_eq!(s.sizes(), &[2, 2, 2]);
        assert_eq!(s.strides(), &[4, 2, 1]);
        assert_eq!(ranks(&s), (0..8).collect::<Vec<_>>());
        assert_eq!(s.base_rank_of(&[1, 1, 0]).unwrap(), 6);
        // The name of the split dimension may be reused.
        let s = hg()
            .split("hosts", &[("hosts", Some(1)), ("h2", None)])
            .unwrap();
        assert_eq!(s.sizes(), &[1, 2, 4]);
        // A strided view splits with scaled strides.
        let v = Shape::new(&[("x", 12)])
            .unwrap()
            .select("x", Some(1), None, 2)
            .unwrap();
        let s = v.split("x", &[("a", Some(3)), ("b", None)]).unwrap();
        assert_eq!(s.sizes(), &[3, 2]);
        assert_eq!(ranks(&s), ranks(&v));
        assert_eq!(ranks(&s), vec![1, 3, 5, 7, 9, 11]);
        // Split then flatten is the identity on ranks.
        assert_eq!(ranks(&s.flatten("x").unwrap()), ranks(&v));
    }

    #[test]
    fn split_errors() {
        let e = hg()
            .split("gpus", &[("a", Some(3)), ("b", None)])
            .unwrap_err()
            .0;
        assert!(
            e.contains("'gpus' of size 4") && e.contains("'a': 3"),
            "{e}"
        );
        let e = hg()
            .split("gpus", &[("a", Some(2)), ("b", Some(3))])
            .unwrap_err()
            .0;
        assert!(e.contains("multiply to 4"), "{e}");
        let e = hg()
            .split("gpus", &[("a", None), ("b", None)])
            .unwrap_err()
            .0;
        assert!(
            e.contains("infer") && e.contains("'a'") && e.contains("'b'"),
            "{e}"
        );
        let e = hg()
            .split("gpus", &[("hosts", None), ("b", Some(2))])
            .unwrap_err()
            .0;
        assert!(e.contains("'hosts' twice"), "{e}");
        assert!(hg().split("gpus", &[("a", None), ("a", Some(2))]).is_err());
        assert!(hg().split("gpus", &[("a", Some(0)), ("b", None)]).is_err());
        assert!(hg().split("gpus", &[]).is_err());
        let e = hg().split("gpu", &[("a", None)]).unwrap_err().0;
        assert!(e.contains("no dimension 'gpu'"), "{e}");
    }

    #[test]
    fn from_parts_rejects_mismatch() {
        assert!(Shape::from_parts(vec!["a".into()], 0, vec![1, 2], vec![1]).is_err());
        assert!(
            Shape::from_parts(vec!["a".into()], usize::MAX, vec![3], vec![usize::MAX]).is_err()
        );
        let s = Shape::from_parts(vec!["a".into()], 2, vec![3], vec![2]).unwrap();
        assert_eq!(s.max_base_rank(), Some(6));
    }

    #[test]
    fn dimension_names_are_checked_everywhere_they_enter() {
        let long = "d".repeat(crate::limits::MAX_NAME_LEN + 1);
        for bad in [long.as_str(), "a\0b", "tab\t"] {
            let e = Shape::new(&[(bad, 2)]).unwrap_err().0;
            assert!(e.contains("dimension name"), "{e}");
            assert!(hg().flatten(bad).is_err());
            assert!(hg().rename(&[("hosts", bad)]).is_err());
            assert!(hg().split("gpus", &[(bad, None)]).is_err());
        }
        assert!(Shape::new(&[(&"d".repeat(crate::limits::MAX_NAME_LEN), 2)]).is_ok());
    }

    #[test]
    fn from_parts_rejects_an_uncountable_number_of_points() {
        let e = Shape::from_parts(
            vec!["a".into(), "b".into()],
            0,
            vec![1 << 40, 1 << 40],
            vec![0, 0],
        )
        .unwrap_err()
        .0;
        assert!(e.contains("more points"), "{e}");
    }
}
