/** Small TCP helpers for the connection-failure tests: a cuttable proxy and a server that never answers. */
import { createServer, connect, type AddressInfo, type Server, type Socket } from "node:net";

/** Forwards 127.0.0.1:<port> to `target` ("host:port"); `cut()` drops every open connection. */
export class TcpProxy {
  private readonly sockets = new Set<Socket>();
  connections = 0;

  private constructor(private readonly server: Server) {}

  static async start(target: string): Promise<TcpProxy> {
    const [host, port] = [target.slice(0, target.lastIndexOf(":")), Number(target.slice(target.lastIndexOf(":") + 1))];
    let proxy: TcpProxy | undefined;
    const server = createServer((client) => {
      proxy!.connections++;
      const upstream = connect(port, host);
      for (const s of [client, upstream]) {
        proxy!.sockets.add(s);
        s.on("close", () => proxy!.sockets.delete(s));
        s.on("error", () => undefined);
      }
      client.pipe(upstream).pipe(client);
      client.on("close", () => upstream.destroy());
      upstream.on("close", () => client.destroy());
    });
    proxy = new TcpProxy(server);
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    return proxy;
  }

  get address(): string {
    return `127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  /** Resets every open connection (both sides), as a network failure would. */
  cut(): void {
    for (const s of this.sockets) s.resetAndDestroy();
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

/** Accepts connections and never writes a byte: every call to it can only end by its deadline. */
export async function silentServer(): Promise<{ address: string; close: () => Promise<void> }> {
  const sockets = new Set<Socket>();
  const server = createServer((s) => {
    sockets.add(s);
    s.on("error", () => undefined);
    s.on("close", () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    address: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/** A local port nothing listens on (bound, then released). */
export async function closedPort(): Promise<string> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  await new Promise<void>((r) => server.close(() => r()));
  return `127.0.0.1:${port}`;
}
