/** The most recent generated text. */
export function SamplePanel({ samples }: { samples: { step: number; text: string }[] }) {
  const last = samples.at(-1);
  if (!last) return null;
  return (
    <section className="sample">
      <h3>Sample after step {last.step}</h3>
      <pre data-testid="sample">{last.text}</pre>
    </section>
  );
}
