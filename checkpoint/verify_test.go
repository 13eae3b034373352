package checkpoint

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"github.com/lifeboat-project/lifeboat/storage"
)

// TestReadDataLevels: the levels verify accepts read back as written, and
// none and all select what they say.
func TestReadDataLevels(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Subset
	}{{"all", ReadAll}, {"none", ReadNone}, {"2/7", Subset{2, 7}}} {
		got, err := ParseSubset(tt.in)
		if err != nil || got != tt.want || got.String() != tt.in {
			t.Errorf("ParseSubset(%q) = %v (%q), %v; want %v", tt.in, got, got.String(), err, tt.want)
		}
	}
	sum := hashOf([]byte("x"))
	if !ReadAll.Contains(sum) || ReadNone.Contains(sum) {
		t.Error("ReadAll must contain every chunk and ReadNone none")
	}
}

// TestVerifyChecksWhatRestoreTakes: two ranks committed named step 10,
// then each rank's counter checkpoint as revision 1 of it. The counter
// revisions cannot be paired; a restore of step 10 takes the named
// revisions 0 beneath them (stepGroup.pairNamed), so Verify checks those
// and says so (Ranks, PassedOver). A chunk of a counter revision missing
// or altered does not make step 10 unrestorable: Verify reports no
// problem. A chunk of a named revision altered does: Verify reports it.
// On the code before, Verify checked the counter revisions: it reported
// the first cases as problems and the last as whole.
func TestVerifyChecksWhatRestoreTakes(t *testing.T) {
	defer verifyNone(t)
	for _, tc := range []struct {
		name  string
		named bool // break a chunk of rank 1's named revision, not of its counter one
		drop  bool // delete the chunk rather than alter its bytes
		want  []ProblemKind
	}{
		{"counter chunk missing", false, true, nil},
		{"counter chunk altered", false, false, nil},
		{"named chunk altered", true, false, []ProblemKind{CorruptChunk}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			allStores(t, func(t *testing.T, s storage.Store) {
				ctx := context.Background()
				u := newUploader(s, nil)
				var named, counter [2]*Manifest
				for rank := range 2 {
					named[rank] = uploadTarget(t, u, Target{Step: 10, Rank: rank, WorldSize: 2}, rankTree(rank, 10)).Manifest
				}
				for rank, iter := range []int64{50, 31} {
					counter[rank] = uploadTarget(t, u, Target{Step: 10, Rank: rank, WorldSize: 2, Counter: true}, rankTree(rank, iter)).Manifest
				}
				broken := counter[1]
				if tc.named {
					broken = named[1]
				}
				key := chunkKey(broken.Files[0].Chunks[0].SHA256)
				if tc.drop {
					if err := s.Delete(ctx, key); err != nil {
						t.Fatal(err)
					}
				} else {
					putBytes(t, s, key, bytes.ToUpper(getBytes(t, s, key)))
				}

				rep, err := Verify(ctx, s, 10, VerifyOptions{ReadData: ReadAll})
				if err != nil {
					t.Fatal(err)
				}
				var kinds []ProblemKind
				for _, p := range rep.Problems {
					kinds = append(kinds, p.Kind)
					if p.Key != key {
						t.Errorf("problem %s; want one of %s", p, key)
					}
				}
				if !slices.Equal(kinds, tc.want) {
					t.Errorf("Verify problems %v; want %v", rep.Problems, tc.want)
				}
				want := []VerifiedRank{
					{Rank: 0, Key: manifestKey(named[0].target(), 0), Revision: 0},
					{Rank: 1, Key: manifestKey(named[1].target(), 0), Revision: 0},
				}
				if !slices.Equal(rep.Ranks, want) || rep.Revision != 0 || rep.PassedOver != "ranks 0,1 are counter checkpoints: ranks cannot be paired" || rep.Manifests != 2 {
					t.Errorf("Verify checked %+v (revision %d, %d manifests), passed over %q; want the named revisions %+v, passed over because the counter ones cannot be paired",
						rep.Ranks, rep.Revision, rep.Manifests, rep.PassedOver, want)
				}
				// A restore of step 10 takes the revisions Verify checked.
				for rank := range 2 {
					res, err := Restore(ctx, s, 10, rank, t.TempDir(), RestoreOptions{WorldSize: 2})
					if tc.want == nil && (err != nil || res.Revision != 0 || res.Manifest.ID != named[rank].ID) {
						t.Errorf("Restore step 10 rank %d = %+v, %v; want its named revision 0", rank, res, err)
					}
					if tc.want != nil && rank == 1 && err == nil {
						t.Errorf("Restore step 10 rank 1 succeeded with the named revision's chunk altered")
					}
				}
			})
		})
	}
}

// TestVerifyChecksRecordedCRC32Cs: what the manifests record of a chunk is
// checked with its bytes. A rank's manifest whose chunk CRC32C disagrees
// with an earlier rank's for the same chunk is a bad manifest; one whose
// CRC32C is not its bytes' makes the chunk corrupt when the data is read
// (the bytes, whose SHA-256 is right, are what the other ranks record).
func TestVerifyChecksRecordedCRC32Cs(t *testing.T) {
	defer verifyNone(t)
	allStores(t, func(t *testing.T, s storage.Store) {
		ctx := context.Background()
		u := newUploader(s, nil)
		same := sampleTree(9) // both ranks save the same bytes
		var res [2]*UploadResult
		for rank := range 2 {
			res[rank] = uploadTarget(t, u, Target{Step: 10, Rank: rank, WorldSize: 2}, same)
		}
		c := bigChunk(res[1])
		rewriteManifest(t, s, res[1], func(m *Manifest) {
			for i := range m.Files {
				for j, o := range m.Files[i].Chunks {
					if o.SHA256 == c.SHA256 {
						crc, _ := o.recordedCRC32C()
						m.Files[i].Chunks[j].CRC32C = crc32cHex(^crc)
					}
				}
			}
		})
		rep, err := Verify(ctx, s, 10, VerifyOptions{ReadData: ReadAll})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Problems) != 1 || rep.Problems[0].Kind != BadManifest || rep.Problems[0].Key != res[1].Key {
			t.Errorf("two ranks disagree about a CRC32C: problems %v; want %s bad", rep.Problems, res[1].Key)
		}

		wrong, err := DecodeManifest(getBytes(t, s, res[1].Key))
		if err != nil {
			t.Fatal(err)
		}
		rewriteManifest(t, s, res[0], func(m *Manifest) { *m = *wrong; m.Rank = 0 })
		if rep, err = Verify(ctx, s, 10, VerifyOptions{ReadData: ReadAll}); err != nil {
			t.Fatal(err)
		}
		if len(rep.Problems) != 1 || rep.Problems[0].Kind != CorruptChunk || rep.Problems[0].Key != chunkKey(c.SHA256) {
			t.Errorf("both ranks record a wrong CRC32C: problems %v; want %s corrupt", rep.Problems, chunkKey(c.SHA256))
		}
	})
}
