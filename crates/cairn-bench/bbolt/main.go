// Command bbolt-bench runs suite T of CairnDB's `cairn bench kv` on bbolt.
//
// It reads the workload description (JSON) on standard input, regenerates
// the keys and values exactly as the Rust harness does (same formats, same
// LCG, same SplitMix64 byte stream), runs the rows in the same order, and
// prints one JSON object with a figure per row on standard output. `cairn
// bench kv` builds it with `go build` and merges its rows as engine "bbolt".
package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Workload is what the Rust harness sends.
type Workload struct {
	Dir           string   `json:"dir"`
	TKeys         int      `json:"t_keys"`
	T5Ops         int      `json:"t5_ops"`
	T5cThreads    int      `json:"t5c_threads"`
	T6Txns        int      `json:"t6_txns"`
	T6Puts        int      `json:"t6_puts"`
	T7Puts        int      `json:"t7_puts"`
	T7AsPublished bool     `json:"t7_as_published"`
	Values        []int    `json:"values"`
	Modes         []string `json:"modes"`
	SeedT3        uint64   `json:"seed_t3"`
	SeedT5        uint64   `json:"seed_t5"`
	SeedT7        uint64   `json:"seed_t7"`
}

// Row is one figure.
type Row struct {
	ID    string  `json:"id"`
	Label string  `json:"label"`
	Unit  string  `json:"unit"`
	Value float64 `json:"value"`
}

// Result is what the harness reads back.
type Result struct {
	Engine  string `json:"engine"`
	Version string `json:"version"`
	Rows    []Row  `json:"rows"`
	// DataDigest is FNV-1a over the generated T3 keys, T5 operations and
	// T7 values: the harness compares it with its own.
	DataDigest uint64   `json:"data_digest"`
	Notes      []string `json:"notes"`
}

var bucket = []byte("kv")

// Thunder's LCG: s = s*6364136223846793005+1; r = s>>33.
type lcg struct{ s uint64 }

func (l *lcg) next() uint64 {
	l.s = l.s*6364136223846793005 + 1
	return l.s >> 33
}

// SplitMix64, as the Rust harness's Rng (crates/cairn-bench/src/data.rs).
type splitmix struct{ s uint64 }

func (r *splitmix) next() uint64 {
	r.s += 0x9E3779B97F4A7C15
	z := r.s
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// fill is the Rust harness's Rng::fill: 8-byte little-endian words, the
// tail from one more word.
func (r *splitmix) fill(buf []byte) {
	i := 0
	for ; i+8 <= len(buf); i += 8 {
		binary.LittleEndian.PutUint64(buf[i:], r.next())
	}
	if i < len(buf) {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], r.next())
		copy(buf[i:], w[:len(buf)-i])
	}
}

// touch reads a value as the Rust harness does: its length, one byte per
// 4 KiB and its last byte.
func touch(v []byte) uint64 {
	acc := uint64(len(v))
	for i := 0; i < len(v); i += 4096 {
		acc += uint64(v[i])
	}
	if len(v) > 0 {
		acc += uint64(v[len(v)-1])
	}
	return acc
}

var sink uint64

type bench struct {
	w      Workload
	rows   []Row
	digest uint64
}

// fnv is FNV-1a (64-bit) over b, continuing from h.
func fnv(h uint64, b []byte) uint64 {
	for _, c := range b {
		h ^= uint64(c)
		h *= 0x100000001b3
	}
	return h
}

func (b *bench) record(id, label, unit string, v float64) {
	b.rows = append(b.rows, Row{ID: id, Label: label, Unit: unit, Value: v})
}

func (b *bench) has(mode string) bool {
	for _, m := range b.w.Modes {
		if m == mode {
			return true
		}
	}
	return false
}

func (b *bench) primary() string {
	if b.has("D") {
		return "D"
	}
	return "N"
}

func open(path string) (*bolt.DB, error) {
	os.Remove(path)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucket)
		return err
	})
	return db, err
}

func discard(db *bolt.DB) {
	p := db.Path()
	db.Close()
	os.Remove(p)
}

func setMode(db *bolt.DB, mode string) {
	db.NoSync = mode == "N"
}

func putAll(db *bolt.DB, keys, vals [][]byte, lo, hi int) error {
	return db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucket)
		for i := lo; i < hi; i++ {
			if err := bk.Put(keys[i], vals[i%len(vals)]); err != nil {
				return err
			}
		}
		return nil
	})
}

func getEach(db *bolt.DB, keys [][]byte) (int, error) {
	found := 0
	err := db.View(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucket)
		for _, k := range keys {
			if v := bk.Get(k); v != nil {
				sink += touch(v)
				found++
			}
		}
		return nil
	})
	return found, err
}

func nLabel(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1_000 && n%1_000 == 0:
		return fmt.Sprintf("%dK", n/1_000)
	}
	return fmt.Sprint(n)
}

func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q * float64(len(sorted))))
	if rank < 1 {
		rank = 1
	}
	if rank > len(sorted) {
		rank = len(sorted)
	}
	return sorted[rank-1]
}

func secs(t time.Time) float64 { return time.Since(t).Seconds() }

type op struct {
	read bool
	i    int
}

func (b *bench) run() error {
	w := b.w
	n := w.TKeys
	nl := nLabel(n)
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("key_%08d", i))
	}
	vals := map[int][][]byte{}
	for _, vs := range []int{27, 100} {
		vv := make([][]byte, n)
		for i := range vv {
			v := []byte(fmt.Sprintf("value_%08d_padding_data", i))
			for len(v) < vs {
				v = append(v, 'x')
			}
			vv[i] = v
		}
		vals[vs] = vv
	}
	l := lcg{w.SeedT3}
	random := make([][]byte, n)
	for i := range random {
		random[i] = keys[l.next()%uint64(n)]
	}
	l = lcg{w.SeedT5}
	ops := make([]op, w.T5Ops)
	for i := range ops {
		r := l.next()
		if r%10 < 7 {
			ops[i] = op{true, int(r % uint64(n))}
		} else {
			ops[i] = op{false, i}
		}
	}
	mixedKeys := make([][]byte, 4*w.T5Ops)
	for i := range mixedKeys {
		mixedKeys[i] = []byte(fmt.Sprintf("mixed_%08d", i))
	}
	mixedVal := [][]byte{[]byte("mixed_value")}
	batchKeys := make([][]byte, 2*w.T6Txns*w.T6Puts)
	for i := range batchKeys {
		batchKeys[i] = []byte(fmt.Sprintf("batch_%06d_%03d", i/w.T6Puts, i%w.T6Puts))
	}
	batchVal := [][]byte{[]byte("batch_value")}
	type large struct {
		size       int
		keys, vals [][]byte
	}
	rng := splitmix{w.SeedT7}
	var larges []large
	for _, size := range []int{1 << 10, 10 << 10, 100 << 10, 1 << 20} {
		lk := make([][]byte, w.T7Puts)
		lv := make([][]byte, w.T7Puts)
		for i := range lk {
			lk[i] = []byte(fmt.Sprintf("large_%08d", i))
		}
		if w.T7AsPublished {
			for i := range lv {
				v := make([]byte, size)
				for j := range v {
					v[j] = byte(j % 256)
				}
				lv[i] = v
			}
		} else {
			// One flat buffer, as Flat::random.
			buf := make([]byte, size*w.T7Puts)
			rng.fill(buf)
			for i := range lv {
				lv[i] = buf[i*size : (i+1)*size]
			}
		}
		larges = append(larges, large{size, lk, lv})
	}

	h := uint64(0xcbf29ce484222325)
	for _, k := range random {
		h = fnv(h, k)
	}
	for _, o := range ops {
		var rec [9]byte
		if o.read {
			rec[0] = 1
		}
		binary.LittleEndian.PutUint64(rec[1:], uint64(o.i))
		h = fnv(h, rec[:])
	}
	for _, lg := range larges {
		for _, v := range lg.vals {
			h = fnv(h, v)
		}
	}
	b.digest = h

	primary := b.primary()
	var kept *bolt.DB
	for _, vs := range []int{27, 100} {
		want := false
		for _, v := range w.Values {
			want = want || v == vs
		}
		if !want {
			continue
		}
		var main *bolt.DB
		for _, mode := range []string{"D", "N"} {
			if !b.has(mode) {
				continue
			}
			db, err := open(filepath.Join(w.Dir, fmt.Sprintf("t1-%d-%s.db", vs, mode)))
			if err != nil {
				return err
			}
			setMode(db, mode)
			t := time.Now()
			if err := putAll(db, keys, vals[vs], 0, n); err != nil {
				return err
			}
			b.record(fmt.Sprintf("T1/%d/%s", vs, mode),
				fmt.Sprintf("T1 %s puts ascending, 1 txn, %d B values (%s)", nl, vs, mode),
				"puts/s", float64(n)/secs(t))
			if mode == primary {
				main = db
			} else {
				discard(db)
			}
		}
		t := time.Now()
		found, err := getEach(main, keys)
		if err != nil || found != n {
			return fmt.Errorf("T2: found %d of %d (%v)", found, n, err)
		}
		b.record(fmt.Sprintf("T2/%d", vs), fmt.Sprintf("T2 %s gets in key order, 1 read txn, %d B", nl, vs), "gets/s", float64(n)/secs(t))
		t = time.Now()
		found, err = getEach(main, random)
		if err != nil || found != n {
			return fmt.Errorf("T3: found %d of %d (%v)", found, n, err)
		}
		b.record(fmt.Sprintf("T3/%d", vs), fmt.Sprintf("T3 %s gets in LCG order, 1 read txn, %d B", nl, vs), "gets/s", float64(n)/secs(t))
		t = time.Now()
		found = 0
		err = main.View(func(tx *bolt.Tx) error {
			c := tx.Bucket(bucket).Cursor()
			for k, v := c.First(); k != nil; k, v = c.Next() {
				sink += touch(k) + touch(v)
				found++
			}
			return nil
		})
		if err != nil || found != n {
			return fmt.Errorf("T4: found %d of %d (%v)", found, n, err)
		}
		b.record(fmt.Sprintf("T4/%d", vs), fmt.Sprintf("T4 full scan of %s entries, %d B", nl, vs), "entries/s", float64(n)/secs(t))
		if kept == nil {
			kept = main
		} else {
			discard(main)
		}
	}
	if kept == nil {
		return fmt.Errorf("no value size selected")
	}
	db := kept
	reads := 0
	for _, o := range ops {
		if o.read {
			reads++
		}
	}
	single := [2]float64{}
	for ti, threads := range []int{1, w.T5cThreads} {
		for mi, mode := range []string{"D", "N"} {
			if !b.has(mode) {
				continue
			}
			setMode(db, mode)
			name := "T5"
			label := fmt.Sprintf("T5 mixed %s ops, 70%% reads (%s)", nLabel(w.T5Ops), mode)
			if ti == 1 {
				name = "T5c"
				label = fmt.Sprintf("T5c mixed %s ops on %d threads (%s)", nLabel(w.T5Ops), threads, mode)
			}
			base := (2*ti + mi) * w.T5Ops
			var mu sync.Mutex
			var lat []float64
			var found int
			var firstErr error
			start := time.Now()
			var wg sync.WaitGroup
			for t := 0; t < threads; t++ {
				wg.Add(1)
				go func(t int) {
					defer wg.Done()
					var my []float64
					myFound := 0
					for j := t; j < len(ops); j += threads {
						o := ops[j]
						if o.read {
							f, err := getEach(db, keys[o.i:o.i+1])
							if err != nil {
								mu.Lock()
								firstErr = err
								mu.Unlock()
								return
							}
							myFound += f
							continue
						}
						k := base + o.i
						s := time.Now()
						put := func(tx *bolt.Tx) error {
							return tx.Bucket(bucket).Put(mixedKeys[k], mixedVal[0])
						}
						var err error
						if threads > 1 && mode == "D" {
							// bbolt's group commit: concurrent writers share one
							// transaction (and one flush). Without a flush its
							// gathering delay (10 ms) only costs, so mode N
							// uses Update.
							err = db.Batch(put)
						} else {
							err = db.Update(put)
						}
						if err != nil {
							mu.Lock()
							firstErr = err
							mu.Unlock()
							return
						}
						my = append(my, float64(time.Since(s).Nanoseconds())/1e3)
					}
					mu.Lock()
					lat = append(lat, my...)
					found += myFound
					mu.Unlock()
				}(t)
			}
			wg.Wait()
			s := secs(start)
			if firstErr != nil {
				return firstErr
			}
			if found != reads {
				return fmt.Errorf("%s: reads found %d of %d", name, found, reads)
			}
			sort.Float64s(lat)
			opss := float64(len(ops)) / s
			b.record(name+"/"+mode, label, "ops/s", opss)
			for _, q := range []struct {
				q float64
				n string
			}{{0.50, "p50"}, {0.99, "p99"}} {
				b.record(fmt.Sprintf("%s/%s/%s", name, mode, q.n), fmt.Sprintf("%s commit latency %s (%s)", name, q.n, mode), "µs", percentile(lat, q.q))
			}
			if ti == 0 {
				single[mi] = opss
			} else if single[mi] > 0 {
				b.record("T5c/"+mode+"/ratio", fmt.Sprintf("T5c ÷ T5 (%s)", mode), "×", opss/single[mi])
			}
		}
	}
	for mi, mode := range []string{"D", "N"} {
		if !b.has(mode) {
			continue
		}
		setMode(db, mode)
		t := time.Now()
		for tx := mi * w.T6Txns; tx < (mi+1)*w.T6Txns; tx++ {
			if err := putAll(db, batchKeys, batchVal, tx*w.T6Puts, (tx+1)*w.T6Puts); err != nil {
				return err
			}
		}
		b.record("T6/"+mode, fmt.Sprintf("T6 %s txns × %d puts, each committed (%s)", nLabel(w.T6Txns), w.T6Puts, mode), "txns/s", float64(w.T6Txns)/secs(t))
	}
	discard(db)
	for _, lg := range larges {
		sl := fmt.Sprintf("%d KiB", lg.size>>10)
		if lg.size >= 1<<20 {
			sl = fmt.Sprintf("%d MiB", lg.size>>20)
		}
		mib := float64(len(lg.keys)*lg.size) / float64(1<<20)
		for _, mode := range []string{"D", "N"} {
			if !b.has(mode) {
				continue
			}
			db, err := open(filepath.Join(w.Dir, fmt.Sprintf("t7-%d-%s.db", lg.size, mode)))
			if err != nil {
				return err
			}
			setMode(db, mode)
			t := time.Now()
			if err := putAll(db, lg.keys, lg.vals, 0, len(lg.keys)); err != nil {
				return err
			}
			b.record(fmt.Sprintf("T7/%d/write/%s", lg.size, mode), fmt.Sprintf("T7 write %d × %s values, 1 txn (%s)", len(lg.keys), sl, mode), "MiB/s", mib/secs(t))
			if mode == primary {
				t = time.Now()
				found, err := getEach(db, lg.keys)
				if err != nil || found != len(lg.keys) {
					return fmt.Errorf("T7 read: found %d (%v)", found, err)
				}
				b.record(fmt.Sprintf("T7/%d/read", lg.size), fmt.Sprintf("T7 read back %d × %s values", len(lg.keys), sl), "MiB/s", mib/secs(t))
			}
			discard(db)
		}
	}
	return nil
}

func version() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, d := range info.Deps {
			if d.Path == "go.etcd.io/bbolt" {
				return d.Path + " " + d.Version + " (" + info.GoVersion + ")"
			}
		}
	}
	return "go.etcd.io/bbolt"
}

func main() {
	var w Workload
	if err := json.NewDecoder(os.Stdin).Decode(&w); err != nil {
		fmt.Fprintln(os.Stderr, "bbolt-bench: reading the workload:", err)
		os.Exit(1)
	}
	if w.TKeys <= 0 || w.T5cThreads <= 0 || w.T6Puts <= 0 || w.Dir == "" {
		fmt.Fprintln(os.Stderr, "bbolt-bench: incomplete workload")
		os.Exit(1)
	}
	if err := os.MkdirAll(w.Dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "bbolt-bench:", err)
		os.Exit(1)
	}
	b := &bench{w: w}
	if err := b.run(); err != nil {
		fmt.Fprintln(os.Stderr, "bbolt-bench:", err)
		os.Exit(1)
	}
	out := Result{Engine: "bbolt", Version: version(), Rows: b.rows, DataDigest: b.digest, Notes: []string{fmt.Sprint("checksum ", sink)}}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(1)
	}
}
