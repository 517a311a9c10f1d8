// GitHub Flavored Markdown (tables, task lists, strikethrough, autolinks, footnotes) for react-markdown:
// what remark-gfm does, without its markdown serializer (mdast-util-to-markdown and the GFM handlers for
// it), which a renderer never calls and which would weigh 7 KB (gzip) in the bundle.
import { gfmFromMarkdown } from 'mdast-util-gfm'
import { gfm } from 'micromark-extension-gfm'
import type { Processor } from 'unified'

type Data = { micromarkExtensions?: unknown[]; fromMarkdownExtensions?: unknown[] }

export function remarkGfm(this: Processor) {
  const data = this.data() as Data
  ;(data.micromarkExtensions ??= []).push(gfm())
  ;(data.fromMarkdownExtensions ??= []).push(gfmFromMarkdown())
}
