package prompt

import (
	"bytes"
	"image"
	_ "image/gif" // image.DecodeConfig reads the sizes of the images users send
	_ "image/jpeg"
	_ "image/png"
	"unicode/utf8"

	"chatd/internal/llm"
)

// Token estimation. chatd cannot run every provider's tokenizer, so it estimates the way byte-pair
// tokenizers split text — a common word is one token, a long word two or three, digits go in threes,
// punctuation and CJK characters one each — and the caller calibrates the estimate by the input tokens the
// provider reports for the requests it was sent (see Calibration). The estimate runs before every model
// call over the whole request, so it is one pass over the bytes without allocating.

// Overheads the APIs add around content, in tokens.
const (
	messageOverhead  = 4
	toolCallOverhead = 8
	toolSpecOverhead = 10
	imageTokens      = 1600 // an image whose size cannot be read; also the most one image is counted
)

// byteClass sorts ASCII bytes for the estimator.
var byteClass = func() (c [128]uint8) {
	for b := range 128 {
		switch {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b == '_':
			c[b] = classLetter
		case b >= '0' && b <= '9':
			c[b] = classDigit
		case b == ' ' || b == '\t':
			c[b] = classSpace
		case b == '\n' || b == '\r':
			c[b] = classNewline
		default:
			c[b] = classPunct
		}
	}
	return c
}()

const (
	classLetter = iota
	classDigit
	classSpace
	classNewline
	classPunct
)

// Estimate returns the estimated number of tokens of s.
func Estimate(s string) int {
	n := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			i += size
			switch {
			case isCJK(r):
				n++
			case size >= 4: // emoji and the like
				n += 2
			default:
				// Other scripts: a run of letters costs about a token per two or three characters.
				j := i
				for j < len(s) && s[j] >= utf8.RuneSelf {
					r2, sz := utf8.DecodeRuneInString(s[j:])
					if isCJK(r2) || sz >= 4 {
						break
					}
					j += sz
				}
				n += 1 + (j-i+size)/6
				i = j
			}
			continue
		}
		switch byteClass[b] {
		case classLetter:
			j := i + 1
			for j < len(s) && s[j] < utf8.RuneSelf && byteClass[s[j]] == classLetter {
				j++
			}
			n += 1 + (j-i-1)/6
			i = j
		case classDigit:
			j := i + 1
			for j < len(s) && s[j] < utf8.RuneSelf && byteClass[s[j]] == classDigit {
				j++
			}
			n += (j - i + 2) / 3
			i = j
		case classSpace:
			// A single space belongs to the word after it; longer runs of indentation are tokens.
			j := i + 1
			for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
				j++
			}
			n += (j - i - 1 + 3) / 4
			i = j
		case classNewline:
			j := i + 1
			for j < len(s) && (s[j] == '\n' || s[j] == '\r') {
				j++
			}
			n++
			i = j
		default:
			// Punctuation: pairs such as (" or ") are one token, a run of one character (----) a token
			// per four.
			j := i + 1
			for j < len(s) && s[j] == b {
				j++
			}
			if j-i > 1 {
				n += 1 + (j-i-1)/4
				i = j
				continue
			}
			for j < len(s) && s[j] < utf8.RuneSelf && byteClass[s[j]] == classPunct && j-i < 2 {
				j++
			}
			n++
			i = j
		}
	}
	return n
}

func isCJK(r rune) bool {
	return r >= 0x2E80 && r <= 0x9FFF || r >= 0xAC00 && r <= 0xD7AF || r >= 0xF900 && r <= 0xFAFF || r >= 0xFF00 && r <= 0xFFEF
}

// estimateImage counts an image as the providers do, about one token per 750 pixels after scaling to at
// most 1.15 megapixels.
func estimateImage(data []byte) int {
	cfg, _, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil || cfg.Width <= 0 || cfg.Height <= 0 {
		return imageTokens
	}
	return min(imageTokens, max(85, cfg.Width*cfg.Height/750))
}

// estimateMessage returns the estimated tokens of m.
func estimateMessage(m *llm.Message) int {
	n := messageOverhead
	for i := range m.Parts {
		p := &m.Parts[i]
		switch p.Kind {
		case llm.PartImage:
			n += estimateImage(p.Data)
		case llm.PartRedactedReasoning:
			n += len(p.Signature) / 4
		default:
			n += Estimate(p.Text)
		}
	}
	for i := range m.ToolCalls {
		c := &m.ToolCalls[i]
		n += toolCallOverhead + Estimate(c.Name) + Estimate(string(c.Arguments))
	}
	return n
}

// EstimateTools returns the estimated tokens the tool declarations add to a request.
func EstimateTools(specs []llm.ToolSpec) int {
	n := 0
	for i := range specs {
		s := &specs[i]
		n += toolSpecOverhead + Estimate(s.Name) + Estimate(s.Description) + Estimate(string(s.InputSchema))
	}
	return n
}

// Calibration corrects the local estimate by what a provider reports: the ratio of reported input tokens
// to the estimate of the same request, smoothed. The zero value is a ratio of 1.
type Calibration struct {
	ratio float64
}

// Observe records that a request estimated at estimate tokens was reported as actual input tokens.
func (c *Calibration) Observe(estimate, actual int) {
	if estimate <= 0 || actual <= 0 {
		return
	}
	r := min(max(float64(actual)/float64(estimate), 0.4), 3)
	if c.ratio == 0 {
		c.ratio = r
		return
	}
	c.ratio = 0.5*c.ratio + 0.5*r
}

// Ratio is the current correction factor.
func (c *Calibration) Ratio() float64 {
	if c.ratio == 0 {
		return 1
	}
	return c.ratio
}

// Apply returns the calibrated value of an estimate.
func (c *Calibration) Apply(estimate int) int {
	return int(float64(estimate)*c.Ratio() + 0.5)
}
