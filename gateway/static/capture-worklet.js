// The microphone's samples as 16-bit PCM, posted to the page in 100 ms blocks. The
// AudioContext runs at 24 kHz (the browser resamples the microphone to it), so a block
// is 2400 samples: what input_audio_buffer.append carries.
class Pcm16Capture extends AudioWorkletProcessor {
  constructor() {
    super();
    this.block = new Int16Array(sampleRate / 10);
    this.filled = 0;
  }

  process(inputs) {
    const channel = inputs[0] && inputs[0][0];
    if (!channel) return true;
    for (let i = 0; i < channel.length; i++) {
      const x = Math.max(-1, Math.min(1, channel[i]));
      this.block[this.filled++] = Math.round(x * 32767);
      if (this.filled === this.block.length) {
        this.port.postMessage(this.block.buffer, [this.block.buffer]);
        this.block = new Int16Array(sampleRate / 10);
        this.filled = 0;
      }
    }
    return true;
  }
}

registerProcessor("pcm16-capture", Pcm16Capture);
