// Small hand-written SVG plots: a horizontal stacked bar (a start's phase
// timings) and a sparkline (metrics, cold starts). Each is an image with a
// text equivalent (`aria-label`, a `<title>` per mark) and a visible
// legend or value beside it, so nothing is told by colour alone.

/** Dark enough for white text on it (contrast above 7:1). */
const PALETTE = ['#1f4e79', '#8a4b08', '#2d6a2d', '#6b2d77', '#8a1c1c', '#36566b', '#5c5c00'];

export interface Segment {
  label: string;
  value: number;
}

/** One horizontal bar split into `segments`, scaled so `scale` fills the
 * width (the longest bar of a set, so bars compare). */
export function StackedBar({
  segments,
  scale,
  format,
  title,
  total = null,
}: {
  segments: Segment[];
  scale: number;
  format: (v: number) => string;
  title: string;
  /** The whole as measured (phases may not add up to it exactly). */
  total?: number | null;
}) {
  const H = 28;
  const sum = segments.reduce((a, s) => a + s.value, 0);
  const k = scale > 0 ? 100 / scale : 0;
  const summary =
    `${title}: ${segments.map((s) => `${s.label} ${format(s.value)}`).join(', ')}` +
    (total != null ? `; total ${format(total)}` : '');
  let x = 0;
  // Widths in percent of the figure: the bar stretches, its text does not.
  return (
    <figure class="stacked">
      <svg role="img" aria-label={summary} width="100%" height={H} class="stacked-bar">
        <rect x="0" y="0" width="100%" height={H} class="track" />
        {segments.map((s, i) => {
          const w = Math.max(s.value * k, s.value > 0 ? 0.3 : 0);
          const at = x;
          x += w;
          return (
            <g key={s.label}>
              <rect x={`${at}%`} y="0" width={`${w}%`} height={H} fill={PALETTE[i % PALETTE.length]}>
                <title>{`${s.label}: ${format(s.value)}`}</title>
              </rect>
              {w > 12 ? (
                <text x={`${at + 1}%`} y={H / 2} dominant-baseline="central" class="seg-label">
                  {s.label}
                </text>
              ) : null}
            </g>
          );
        })}
      </svg>
      <figcaption>
        <ul class="legend">
          {segments.map((s, i) => (
            <li key={s.label}>
              <span class="swatch" style={{ background: PALETTE[i % PALETTE.length] }} aria-hidden="true" />
              {s.label} <span class="num">{format(s.value)}</span>
            </li>
          ))}
          <li class="sum">
            {total != null ? 'total' : 'sum'} <span class="num">{format(total ?? sum)}</span>
          </li>
        </ul>
      </figcaption>
    </figure>
  );
}

/** A line of `values` (oldest first), zero at the bottom; `points` also
 * marks each value (few, irregular samples such as cold starts). */
export function Sparkline({
  values,
  label,
  format,
  points = false,
  width = 160,
  height = 36,
}: {
  values: number[];
  label: string;
  format: (v: number) => string;
  points?: boolean;
  width?: number;
  height?: number;
}) {
  if (values.length === 0) {
    return <span class="spark-empty">{`${label}: no data yet`}</span>;
  }
  const max = Math.max(...values);
  const min = Math.min(...values);
  const top = max > 0 ? max : 1;
  const pad = 3;
  const step = values.length > 1 ? (width - 2 * pad) / (values.length - 1) : 0;
  const xy = values.map((v, i) => {
    const x = values.length > 1 ? pad + i * step : width / 2;
    const y = height - pad - (v / top) * (height - 2 * pad);
    return [x, y] as const;
  });
  const last = values[values.length - 1];
  const summary =
    `${label}: last ${format(last)}, min ${format(min)}, max ${format(max)}, ` +
    `${values.length} sample${values.length === 1 ? '' : 's'}`;
  return (
    <svg
      role="img"
      aria-label={summary}
      class="spark"
      width={width}
      height={height}
      viewBox={`0 0 ${width} ${height}`}
    >
      <title>{summary}</title>
      <line x1={pad} x2={width - pad} y1={height - pad} y2={height - pad} class="axis" />
      {xy.length > 1 ? (
        <polyline points={xy.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(' ')} class="line" />
      ) : null}
      {points || xy.length === 1
        ? xy.map(([x, y], i) => <circle key={i} cx={x} cy={y} r="2.5" class="dot" />)
        : null}
    </svg>
  );
}
