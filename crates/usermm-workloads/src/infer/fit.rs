//! The fitting arithmetic of `usermm infer`, apart from the engine: least squares on
//! logarithms by Levenberg–Marquardt with forward differences, and a secant search for one
//! factor. Deterministic: the same residual function gives the same steps, bit for bit.
//!
//! Parameters are the logarithms of the factors (`θ = ln f`), so a step is a ratio and the
//! search box [`MIN_FACTOR`, `MAX_FACTOR`] is symmetric. Residuals are `ln(model / published)`
//! of each training row: a relative error, the same weight for every row.

use usermm::vtime::{MAX_FACTOR, MIN_FACTOR};

/// The forward-difference step of the Jacobian, in `θ`: 5 % of the factor. Large against the
/// model's granularity (a virtual run prices whole events; a 5 % step moves every row by
/// many of them), small against the curvature of a time in its costs.
pub const DIFF_STEP: f64 = 0.048_790_164_169_432; // ln(1.05)

/// Stop when every residual is within this (0.5 %).
pub const TOLERANCE: f64 = 0.005;

/// Stop when a step lowers the sum of squares by less than this share of it (1 %): each
/// iteration costs a Jacobian's worth of engine runs, and a step that gains less moves no
/// residual by a visible amount against bands of ±10 %.
pub const MIN_GAIN: f64 = 0.01;

/// Most Levenberg–Marquardt iterations (one Jacobian each).
pub const MAX_ITERATIONS: usize = 8;

/// Evaluates the residual vector at each of several points (in `θ`); the caller may run them
/// in parallel. Every point gives a vector of the same length.
pub type Residuals<'a> = dyn FnMut(&[Vec<f64>]) -> Vec<Vec<f64>> + 'a;

/// One accepted point of a fit.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub theta: Vec<f64>,
    pub residuals: Vec<f64>,
}

/// The result of [`levenberg_marquardt`].
#[derive(Debug, Clone, PartialEq)]
pub struct LmFit {
    /// The accepted points, the start first and the fit last.
    pub path: Vec<Step>,
    /// `∂r_i/∂θ_k` at the last point where it was computed (rows × parameters).
    pub jacobian: Vec<Vec<f64>>,
    /// Points evaluated in all.
    pub evaluations: usize,
    /// Why the search stopped.
    pub stopped: &'static str,
}

impl LmFit {
    pub fn last(&self) -> &Step {
        self.path.last().expect("a fit has its start point")
    }
}

fn sum_sq(r: &[f64]) -> f64 {
    r.iter().map(|x| x * x).sum()
}

/// A search box in factors: `(low, high)`.
pub type Bounds = (f64, f64);

/// The widest box: what an era file may hold.
pub const WIDE: Bounds = (MIN_FACTOR, MAX_FACTOR);

fn clamp_theta(t: f64, b: Bounds) -> f64 {
    t.clamp(b.0.ln(), b.1.ln())
}

/// Solves `a x = b` (square, small) by Gaussian elimination with partial pivoting; `None`
/// when singular.
fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let n = b.len();
    for col in 0..n {
        let pivot = (col..n).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() < 1e-300 {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        let (top, rest) = a.split_at_mut(col + 1);
        let pivot_row = &top[col];
        for (i, r) in rest.iter_mut().enumerate() {
            let m = r[col] / pivot_row[col];
            for (x, p) in r[col..].iter_mut().zip(&pivot_row[col..]) {
                *x -= m * p;
            }
            b[col + 1 + i] -= m * b[col];
        }
    }
    let mut x = vec![0.0; n];
    for row in (0..n).rev() {
        let s: f64 = (row + 1..n).map(|k| a[row][k] * x[k]).sum();
        x[row] = (b[row] - s) / a[row][row];
    }
    Some(x)
}

/// Least squares from `start`: Levenberg–Marquardt in `θ` with Marquardt's scaling
/// (`JᵀJ + λ·diag(JᵀJ)`), λ from 10⁻², divided by 3 on a step that lowers the sum of squares
/// and multiplied by 4 on one that does not. Each iteration evaluates the Jacobian's
/// `n` forward-difference points in one batch, then trial points one at a time. Stops when
/// every residual is within [`TOLERANCE`], when no step lowers the sum by a relative
/// [`MIN_GAIN`], or after [`MAX_ITERATIONS`].
pub fn levenberg_marquardt(start: Vec<f64>, f: &mut Residuals<'_>) -> LmFit {
    let first = f(std::slice::from_ref(&start)).remove(0);
    let mut fit = levenberg_marquardt_from(
        Step {
            theta: start,
            residuals: first,
        },
        f,
        WIDE,
    );
    fit.evaluations += 1;
    fit
}

/// [`levenberg_marquardt`] from a point whose residuals are known already (a scan's best),
/// every step clamped to `bounds`.
pub fn levenberg_marquardt_from(start: Step, f: &mut Residuals<'_>, bounds: Bounds) -> LmFit {
    let n = start.theta.len();
    let mut evaluations = 0;
    let mut path = vec![start];
    let mut lambda: f64 = 1e-2;
    let mut jacobian: Vec<Vec<f64>> = Vec::new();
    let mut stopped = "iterations";
    for _ in 0..MAX_ITERATIONS {
        let here = path.last().expect("start").clone();
        if here.residuals.iter().all(|r| r.abs() <= TOLERANCE) {
            stopped = "every residual within tolerance";
            break;
        }
        let points: Vec<Vec<f64>> = (0..n)
            .map(|k| {
                let mut t = here.theta.clone();
                t[k] += DIFF_STEP;
                t
            })
            .collect();
        let shifted = f(&points);
        evaluations += n;
        let m = here.residuals.len();
        jacobian = (0..m)
            .map(|i| {
                (0..n)
                    .map(|k| (shifted[k][i] - here.residuals[i]) / DIFF_STEP)
                    .collect()
            })
            .collect();
        let jtj: Vec<Vec<f64>> = (0..n)
            .map(|a| {
                (0..n)
                    .map(|b| (0..m).map(|i| jacobian[i][a] * jacobian[i][b]).sum())
                    .collect()
            })
            .collect();
        let jtr: Vec<f64> = (0..n)
            .map(|a| {
                -(0..m)
                    .map(|i| jacobian[i][a] * here.residuals[i])
                    .sum::<f64>()
            })
            .collect();
        let s0 = sum_sq(&here.residuals);
        let mut accepted = false;
        for _ in 0..6 {
            let mut a = jtj.clone();
            for (k, row) in a.iter_mut().enumerate() {
                row[k] += lambda * jtj[k][k].max(1e-12);
            }
            let Some(delta) = solve(a, jtr.clone()) else {
                lambda *= 4.0;
                continue;
            };
            let trial: Vec<f64> = here
                .theta
                .iter()
                .zip(&delta)
                .map(|(t, d)| clamp_theta(t + d, bounds))
                .collect();
            let r = f(std::slice::from_ref(&trial)).remove(0);
            evaluations += 1;
            if sum_sq(&r) < s0 {
                let gain = (s0 - sum_sq(&r)) / s0.max(1e-300);
                path.push(Step {
                    theta: trial,
                    residuals: r,
                });
                lambda = (lambda / 3.0).max(1e-7);
                accepted = true;
                if gain < MIN_GAIN {
                    stopped = "the sum of squares stopped falling";
                }
                break;
            }
            lambda *= 4.0;
        }
        if !accepted {
            stopped = "no step lowers the sum of squares";
            break;
        }
        if stopped != "iterations" {
            break;
        }
    }
    if path
        .last()
        .is_some_and(|s| s.residuals.iter().all(|r| r.abs() <= TOLERANCE))
    {
        stopped = "every residual within tolerance";
    }
    LmFit {
        path,
        jacobian,
        evaluations,
        stopped,
    }
}

/// The result of [`secant`].
#[derive(Debug, Clone, PartialEq)]
pub struct SecantFit {
    /// `(θ, residual)` of every point evaluated, in order; the last is the fit.
    pub path: Vec<(f64, f64)>,
    pub stopped: &'static str,
}

/// The root of one residual `r(θ)` by the secant method from `θ0` and `θ0 + DIFF_STEP·4`,
/// each step clamped to `bounds`; stops within [`TOLERANCE`], at the box's edge (the
/// factor the rows want lies outside it), or after 10 points.
pub fn secant(theta0: f64, f: &mut dyn FnMut(f64) -> f64, bounds: Bounds) -> SecantFit {
    let theta0 = clamp_theta(theta0, bounds);
    let mut path = vec![(theta0, f(theta0))];
    let t1 = clamp_theta(theta0 + 4.0 * DIFF_STEP, bounds);
    path.push((t1, f(t1)));
    let stopped;
    loop {
        let (ta, ra) = path[path.len() - 2];
        let (tb, rb) = path[path.len() - 1];
        if rb.abs() <= TOLERANCE {
            stopped = "residual within tolerance";
            break;
        }
        if path.len() >= 10 {
            stopped = "points";
            break;
        }
        if rb == ra {
            stopped = "the residual does not move with the factor";
            break;
        }
        let next = tb - rb * (tb - ta) / (rb - ra);
        let clamped = clamp_theta(next, bounds);
        if clamped == tb {
            stopped = "the search box's edge";
            break;
        }
        path.push((clamped, f(clamped)));
    }
    // The fit is the point with the smallest residual.
    let best = path
        .iter()
        .copied()
        .min_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
        .expect("two points at least");
    if path.last() != Some(&best) {
        path.push(best);
    }
    SecantFit { path, stopped }
}

/// The interval of `θ_k` (the others held) over which every residual stays within its band
/// (a relative error of ±`band_i`, i.e. `ln(1 - band_i) ≤ r ≤ ln(1 + band_i)`), by the linear
/// model `r + J·Δ` at the fit: `(low, high)` offsets from
/// `θ_k`, each `None` where no row bounds that side (within the search box) or where a row is
/// already outside its band.
pub fn linear_range(
    residuals: &[f64],
    jacobian: &[Vec<f64>],
    bands: &[f64],
    k: usize,
) -> (Option<f64>, Option<f64>) {
    let (mut low, mut high) = (f64::NEG_INFINITY, f64::INFINITY);
    for (i, r) in residuals.iter().enumerate() {
        let (bl, bh) = ((1.0 - bands[i]).max(1e-9).ln(), (1.0 + bands[i]).ln());
        if *r < bl || *r > bh {
            return (None, None);
        }
        let j = jacobian[i][k];
        if j.abs() < 1e-12 {
            continue;
        }
        let (a, c) = ((bl - r) / j, (bh - r) / j);
        let (lo, hi) = if a < c { (a, c) } else { (c, a) };
        low = low.max(lo);
        high = high.min(hi);
    }
    (
        low.is_finite().then_some(low),
        high.is_finite().then_some(high),
    )
}

#[cfg(test)]
mod test {
    use super::*;

    /// A smooth model with a known answer: r_i = ln(Σ_k a_ik·f_k / p_i).
    fn model(theta: &[f64]) -> Vec<f64> {
        let a = [[1.0, 2.0, 0.5], [0.2, 1.0, 1.5], [0.7, 0.1, 1.0]];
        let truth = [0.5, 1.7, 0.9];
        (0..3)
            .map(|i| {
                let m: f64 = (0..3).map(|k| a[i][k] * theta[k].exp()).sum();
                let p: f64 = (0..3).map(|k| a[i][k] * truth[k]).sum();
                (m / p).ln()
            })
            .collect()
    }

    #[test]
    fn lm_finds_a_known_solution_and_is_deterministic() {
        let mut calls = 0;
        let mut f = |pts: &[Vec<f64>]| {
            calls += pts.len();
            pts.iter().map(|p| model(p)).collect::<Vec<_>>()
        };
        let fit = levenberg_marquardt(vec![0.0; 3], &mut f);
        let f_hat: Vec<f64> = fit.last().theta.iter().map(|t| t.exp()).collect();
        for (got, want) in f_hat.iter().zip([0.5, 1.7, 0.9]) {
            assert!((got / want - 1.0).abs() < 0.02, "{f_hat:?}");
        }
        assert!(fit.last().residuals.iter().all(|r| r.abs() <= TOLERANCE));
        assert_eq!(fit.evaluations, calls);
        let again = levenberg_marquardt(vec![0.0; 3], &mut |pts: &[Vec<f64>]| {
            pts.iter().map(|p| model(p)).collect()
        });
        assert_eq!(fit, again);
    }

    #[test]
    fn lm_stays_in_the_box_when_the_answer_is_outside_it() {
        // Wants f = 100: the fit stops at the box's edge and reports its residual.
        let mut f = |pts: &[Vec<f64>]| {
            pts.iter()
                .map(|p| vec![p[0] - 100f64.ln()])
                .collect::<Vec<_>>()
        };
        let fit = levenberg_marquardt(vec![0.0], &mut f);
        let t = fit.last().theta[0];
        assert!((t - MAX_FACTOR.ln()).abs() < 1e-9, "{t}");
        assert!(fit.last().residuals[0] < -1.0);
    }

    #[test]
    fn secant_finds_a_root_and_reports_the_edge() {
        let fit = secant(0.0, &mut |t| (0.3 + 0.5 * t.exp()).ln() - 1.2f64.ln(), WIDE);
        let (t, r) = *fit.path.last().unwrap();
        assert!(r.abs() <= TOLERANCE, "{fit:?}");
        assert!((t.exp() - 1.8).abs() < 0.05);
        let edge = secant(0.0, &mut |t| t - 10.0, WIDE);
        assert_eq!(edge.stopped, "the search box's edge");
        assert!((edge.path.last().unwrap().0 - MAX_FACTOR.ln()).abs() < 1e-9);
    }

    #[test]
    fn linear_range_is_the_intersection_of_the_rows_bands() {
        // r = [0, 0.02]; J column: [1, -2]; bands 10 %: ln 0.9 ≤ r ≤ ln 1.1.
        let j = vec![vec![1.0], vec![-2.0]];
        let (lo, hi) = linear_range(&[0.0, 0.02], &j, &[0.1, 0.1], 0);
        let (bl, bh) = (0.9f64.ln(), 1.1f64.ln());
        // Row 0 allows Δ in [bl, bh]; row 1 (0.02 − 2Δ) allows Δ in [(0.02−bh)/2, (0.02−bl)/2].
        assert!((lo.unwrap() - bl.max((0.02 - bh) / 2.0)).abs() < 1e-12);
        assert!((hi.unwrap() - bh.min((0.02 - bl) / 2.0)).abs() < 1e-12);
        // A row already outside its band: no range.
        assert_eq!(linear_range(&[0.2, 0.0], &j, &[0.1, 0.1], 0), (None, None));
    }

    #[test]
    fn solve_is_gaussian_elimination() {
        let x = solve(vec![vec![2.0, 1.0], vec![1.0, 3.0]], vec![3.0, 5.0]).unwrap();
        assert!((x[0] - 0.8).abs() < 1e-12 && (x[1] - 1.4).abs() < 1e-12);
        assert!(solve(vec![vec![1.0, 2.0], vec![2.0, 4.0]], vec![1.0, 2.0]).is_none());
    }
}
