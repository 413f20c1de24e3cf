// A scripted language model for the demo, the examples and agent tests: speaks the AI SDK v5 LanguageModelV2 interface
// (specificationVersion 'v2'), which Mastra's Agent accepts as `model`, and answers from a fixed script.
//
// createScriptedModel(steps): step i answers the agent's i-th model call (the last step repeats). A step is
//   { toolCall: { toolName, input } }  -> the model calls that tool
//   { text: '...' }                     -> the model answers with text and stops
//   (ctx) => step | Promise<step>       -> computed from ctx = { prompt, lastToolResult, callIndex }
// model.calls holds every call's options (prompt, tools, ...) for assertions.

const USAGE = { inputTokens: 1, outputTokens: 1, totalTokens: 2 };

/** The text of the newest tool result in a LanguageModelV2 prompt, or undefined. */
export function lastToolResult(prompt = []) {
  for (const message of [...prompt].reverse()) {
    if (message.role !== 'tool') continue;
    for (const part of [...message.content].reverse()) {
      if (part.type !== 'tool-result') continue;
      const value = part.output?.value;
      return typeof value === 'string' ? value : JSON.stringify(value ?? part.output);
    }
  }
  return undefined;
}

export function createScriptedModel(steps, { modelId = 'scripted-model' } = {}) {
  if (!Array.isArray(steps) || steps.length === 0) throw new TypeError('createScriptedModel: steps must be a non-empty array');
  const calls = [];

  async function answer(options) {
    const callIndex = calls.length;
    calls.push(options);
    const entry = steps[Math.min(callIndex, steps.length - 1)];
    const step = typeof entry === 'function'
      ? await entry({ prompt: options.prompt, lastToolResult: lastToolResult(options.prompt), callIndex })
      : entry;
    if (step?.toolCall) {
      return {
        toolCall: {
          type: 'tool-call',
          toolCallId: `scripted-call-${callIndex + 1}`,
          toolName: step.toolCall.toolName,
          input: JSON.stringify(step.toolCall.input ?? {}),
        },
      };
    }
    return { text: String(step?.text ?? '') };
  }

  return {
    specificationVersion: 'v2',
    provider: 'scripted',
    modelId,
    supportedUrls: {},
    calls,

    async doGenerate(options) {
      const a = await answer(options);
      const content = a.toolCall ? [a.toolCall] : [{ type: 'text', text: a.text }];
      return { content, finishReason: a.toolCall ? 'tool-calls' : 'stop', usage: USAGE, warnings: [] };
    },

    async doStream(options) {
      const a = await answer(options);
      const parts = [
        { type: 'stream-start', warnings: [] },
        { type: 'response-metadata', id: `scripted-response-${calls.length}`, modelId, timestamp: new Date(0) },
      ];
      if (a.toolCall) {
        parts.push(a.toolCall, { type: 'finish', finishReason: 'tool-calls', usage: USAGE });
      } else {
        parts.push(
          { type: 'text-start', id: 'text-1' },
          { type: 'text-delta', id: 'text-1', delta: a.text },
          { type: 'text-end', id: 'text-1' },
          { type: 'finish', finishReason: 'stop', usage: USAGE },
        );
      }
      const stream = new ReadableStream({
        start(controller) {
          for (const part of parts) controller.enqueue(part);
          controller.close();
        },
      });
      return { stream };
    },
  };
}
