use std::time::Instant;
fn sum_block(a: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    for c in a.chunks_exact(16) { for k in 0..16 { acc[k] += c[k]; } }
    acc.iter().sum()
}
fn walk(a: &[f32], block: usize, back: bool) -> f32 {
    let n = a.len() / block;
    let mut s = 0.0;
    if back { for b in (0..n).rev() { s += sum_block(&a[b*block..(b+1)*block]); } }
    else { for b in 0..n { s += sum_block(&a[b*block..(b+1)*block]); } }
    s
}
fn main() {
    let mb: usize = std::env::args().nth(1).unwrap().parse().unwrap();
    let n = mb << 18; // f32 elements
    let a: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let junk: Vec<f32> = vec![1.0; 64 << 18];
    let block = 128 * 1024; // 512 KiB blocks
    let (mut fw, mut bw) = (Vec::new(), Vec::new());
    let mut sink = 0.0;
    for r in 0..40 {
        sink += sum_block(&junk); // evict
        sink += walk(&a, block, false); // pass 1 forward
        let t = Instant::now();
        let back = r % 2 == 1;
        sink += walk(&a, block, back);
        let e = t.elapsed().as_secs_f64() * 1e6;
        if back { bw.push(e) } else { fw.push(e) }
    }
    fw.sort_by(|a, b| a.partial_cmp(b).unwrap()); bw.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("{mb} MiB: pass 2 forward min {:.0} med {:.0} µs | backward min {:.0} med {:.0} µs ({sink})", fw[0], fw[fw.len()/2], bw[0], bw[bw.len()/2]);
}
