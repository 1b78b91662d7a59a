<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE TS>
<TS version="2.1" language="zh_CN">
<context>
    <name>About</name>
    <message>
        <source>&amp;Help</source>
        <translation>帮助(&amp;H)</translation>
    </message>
    <message>
        <source>A chat app that runs language models on this computer and shows why their replies come fast.</source>
        <translation>一个在本机运行语言模型的聊天应用，并展示回复为什么来得这么快。</translation>
    </message>
    <message>
        <source>Data folder: {path}</source>
        <translation>数据文件夹：{path}</translation>
    </message>
    <message>
        <source>Logs folder: {path}</source>
        <translation>日志文件夹：{path}</translation>
    </message>
    <message>
        <source>Licences:</source>
        <translation>许可证：</translation>
    </message>
    <message>
        <source>A model you download keeps its own licence: its page in Models… names it.</source>
        <translation>你下载的模型沿用其自身的许可证：“模型管理…”中该模型的页面会写明。</translation>
    </message>
    <message>
        <source>About Miaohui</source>
        <translation>关于秒回</translation>
    </message>
</context>
<context>
    <name>Accessibility</name>
    <message>
        <source>{figure}: {value}</source>
        <translation>{figure}：{value}</translation>
    </message>
</context>
<context>
    <name>ApiKeys</name>
    <message>
        <source>The key could not be saved in the keyring ({error}); it is kept until Miaohui closes.</source>
        <translation>无法将密钥保存到钥匙串（{error}）；它会保留到秒回关闭为止。</translation>
    </message>
</context>
<context>
    <name>ApiServing</name>
    <message>
        <source>Serve this model (OpenAI API)</source>
        <translation>通过 OpenAI 兼容 API 提供此模型</translation>
    </message>
    <message>
        <source>API port…</source>
        <translation>API 端口…</translation>
    </message>
    <message>
        <source>Parallel API requests…</source>
        <translation>并行 API 请求数…</translation>
    </message>
    <message>
        <source>The loaded model as an OpenAI-compatible API, reachable from this computer only (no API key needed)</source>
        <translation>通过 OpenAI 兼容 API 提供已加载的模型，仅本机可访问（无需 API 密钥）</translation>
    </message>
    <message>
        <source>API port</source>
        <translation>API 端口</translation>
    </message>
    <message>
        <source>Serve the OpenAI API on 127.0.0.1, port:</source>
        <translation>在 127.0.0.1 上提供 OpenAI 兼容 API，端口：</translation>
    </message>
    <message>
        <source>Parallel API requests</source>
        <translation>并行 API 请求数</translation>
    </message>
    <message>
        <source>API requests decoded together (1: one at a time; more use more memory for their caches):</source>
        <translation>同时解码的 API 请求数（1：逐个处理；越多，各请求的缓存占用内存越多）：</translation>
    </message>
    <message>
        <source>Could not serve the model on {host}:{port}: {reason}. Choose another port in Chat → API port…</source>
        <translation>无法在 {host}:{port} 上提供模型服务：{reason}。请在“对话 → API 端口…”中换一个端口。</translation>
    </message>
    <message>
        <source>A model on another server is not served again: load a model on this computer to serve it.</source>
        <translation>其他服务器上的模型不会经由本机再次对外提供：请加载一个本机模型来提供服务。</translation>
    </message>
    <message>
        <source>The API serves one request at a time with this model: {reason}</source>
        <translation>此模型的 API 一次只处理一个请求：{reason}</translation>
    </message>
    <message>
        <source>API {url} · waiting for a model loaded on this computer</source>
        <translation>API {url} · 等待在本机加载模型</translation>
    </message>
    <message>
        <source>API {url} · {n} request served</source>
        <translation>API {url} · 已处理 {n} 个请求</translation>
    </message>
    <message>
        <source>API {url} · {n} requests served</source>
        <translation>API {url} · 已处理 {n} 个请求</translation>
    </message>
</context>
<context>
    <name>AttachmentChip</name>
    <message>
        <source>reading…</source>
        <translation>读取中…</translation>
    </message>
    <message>
        <source>Remove this file</source>
        <translation>移除此文件</translation>
    </message>
    <message>
        <source>Remove {name}</source>
        <translation>移除 {name}</translation>
    </message>
    <message>
        <source>{tokens} tokens</source>
        <translation>{tokens} 个 token</translation>
    </message>
    <message>
        <source>{pages} pages · {tokens} tokens</source>
        <translation>{pages} 页 · {tokens} 个 token</translation>
    </message>
    <message>
        <source>image · {width}×{height}</source>
        <translation>图片 · {width}×{height}</translation>
    </message>
</context>
<context>
    <name>Attachments</name>
    <message>
        <source>pasted image</source>
        <translation>粘贴的图片</translation>
    </message>
    <message>
        <source>pasted image {n}</source>
        <translation>粘贴的图片 {n}</translation>
    </message>
</context>
<context>
    <name>ChatController</name>
    <message>
        <source>Your message is empty.</source>
        <translation>消息是空的。</translation>
    </message>
    <message>
        <source>The model is still loading; send when it is ready.</source>
        <translation>模型仍在加载，加载完成后再发送。</translation>
    </message>
    <message>
        <source>No model loaded: choose a model above and press Load.</source>
        <translation>尚未加载模型：请在上方选择模型并点击“加载”。</translation>
    </message>
    <message>
        <source>The reply settings cannot be used: {why}</source>
        <translation>回复设置无法使用：{why}</translation>
    </message>
    <message>
        <source>This chat was changed in another window since it was opened; nothing was deleted. It is reloaded: try again.</source>
        <translation>此对话打开后已在另一个窗口中被修改，未删除任何内容。对话已重新载入，请再试一次。</translation>
    </message>
    <message>
        <source>Stopped: the partial reply is kept; press Continue for more.</source>
        <translation>已停止：已生成的部分回复会保留；点击“继续生成”可以接着写。</translation>
    </message>
    <message>
        <source>Stopped before the reply began.</source>
        <translation>已在回复开始前停止。</translation>
    </message>
    <message>
        <source>Stopped: the partial reply is kept.</source>
        <translation type="vanished">已停止：已生成的部分回复会保留。</translation>
    </message>
    <message>
        <source>The reply reached the max new tokens limit: press Continue for more.</source>
        <translation>回复已达到最大生成 token 数：点击“继续生成”可以接着写。</translation>
    </message>
    <message>
        <source>History not saved: {why}</source>
        <translation>历史记录未保存：{why}</translation>
    </message>
    <message>
        <source> (still using {name})</source>
        <translation>（仍在使用 {name}）</translation>
    </message>
    <message>
        <source>Could not load the model: {0}{1}</source>
        <translation>无法加载模型：{0}{1}</translation>
    </message>
    <message>
        <source>Connected to {name} at {url}.</source>
        <translation>已连接到 {url} 上的 {name}。</translation>
    </message>
    <message>
        <source>Loaded {name}: {m} M parameters, {precision} on {device}.</source>
        <translation>已加载 {name}：{m} M 参数，{precision} 精度，运行于 {device}。</translation>
    </message>
    <message>
        <source>It is here to watch the engine work, not for answers: Models… → Recommended lists real chat models ranked for this machine.</source>
        <translation>它是用来观察推理引擎如何工作的，不是用来回答问题的：“模型管理… → 推荐”里列出了按本机情况排序、真正能对话的模型。</translation>
    </message>
</context>
<context>
    <name>ChatGptImport</name>
    <message>
        <source>Import ChatGPT export…</source>
        <translation>导入 ChatGPT 导出文件…</translation>
    </message>
    <message>
        <source>Add the chats of a ChatGPT data export (conversations.json) to the history</source>
        <translation>将 ChatGPT 数据导出文件（conversations.json）中的对话添加到历史记录</translation>
    </message>
    <message>
        <source>The history is read-only here: nothing can be imported.</source>
        <translation>此处的历史记录为只读，无法导入任何内容。</translation>
    </message>
    <message>
        <source>Importing ChatGPT export {name}…</source>
        <translation>正在导入 ChatGPT 导出文件 {name}…</translation>
    </message>
    <message>
        <source>Import ChatGPT export</source>
        <translation>导入 ChatGPT 导出文件</translation>
    </message>
    <message>
        <source>ChatGPT export (conversations.json *.json)</source>
        <translation>ChatGPT 导出文件 (conversations.json *.json)</translation>
    </message>
    <message>
        <source>Importing ChatGPT export… {percent}%</source>
        <translation>正在导入 ChatGPT 导出文件… {percent}%</translation>
    </message>
    <message>
        <source>The ChatGPT export holds no chats to import.</source>
        <translation>该 ChatGPT 导出文件中没有可导入的对话。</translation>
    </message>
    <message>
        <source>Imported {n} chats from ChatGPT; they go on with the loaded model.</source>
        <translation>已从 ChatGPT 导入 {n} 个对话；继续这些对话时将使用当前加载的模型。</translation>
    </message>
    <message>
        <source>Nothing imported: {why}</source>
        <translation>未导入任何内容：{why}</translation>
    </message>
</context>
<context>
    <name>ChatView</name>
    <message>
        <source>

[… {n} more characters not shown here]</source>
        <translation>

[… 另有 {n} 个字符未在此显示]</translation>
    </message>
    <message>
        <source>Conversation</source>
        <translation>对话</translation>
    </message>
    <message>
        <source>The messages of this chat, oldest first</source>
        <translation>本次对话的消息，最早的在前</translation>
    </message>
    <message>
        <source>Ask anything. Replies stream token by token; the panel on the right shows why they arrive fast.</source>
        <translation>尽管问吧。回复会逐个 token 流式输出，右侧面板告诉你它为什么来得这么快。</translation>
    </message>
    <message>
        <source>Show {page} earlier messages ({count} not shown)</source>
        <translation>显示更早的 {page} 条消息（还有 {count} 条未显示）</translation>
    </message>
</context>
<context>
    <name>CollectionsIndexer</name>
    <message>
        <source>No embedding model is installed: indexed for keyword search only.</source>
        <translation>未安装嵌入模型：仅按关键词建立索引。</translation>
    </message>
</context>
<context>
    <name>CollectionsUi</name>
    <message>
        <source>Collections…</source>
        <translation>资料库…</translation>
    </message>
    <message>
        <source>Folders and files indexed for answers with sources</source>
        <translation>已建立索引、可用于带出处回答的文件夹和文件</translation>
    </message>
</context>
<context>
    <name>CollectionsWindow</name>
    <message>
        <source>Collections</source>
        <translation>资料库</translation>
    </message>
    <message>
        <source>Folders and files indexed for answers with sources. Pick the collections a conversation answers from with the 📚 button beside Attach.</source>
        <translation>已建立索引、可用于带出处回答的文件夹和文件。用“附加”旁的 📚 按钮为对话选择要依据的资料库。</translation>
    </message>
    <message>
        <source>Collection</source>
        <translation>资料库</translation>
    </message>
    <message>
        <source>Files</source>
        <translation>文件</translation>
    </message>
    <message>
        <source>Passages</source>
        <translation>段落</translation>
    </message>
    <message>
        <source>Size</source>
        <translation>大小</translation>
    </message>
    <message>
        <source>Embedded</source>
        <translation>已嵌入</translation>
    </message>
    <message>
        <source>Each collection&apos;s files, passages and size</source>
        <translation>每个资料库的文件、段落和大小</translation>
    </message>
    <message>
        <source>No collections yet: name one below and add a folder or files.</source>
        <translation>还没有资料库：在下方起个名字，再添加文件夹或文件。</translation>
    </message>
    <message>
        <source>Collection:</source>
        <translation>资料库：</translation>
    </message>
    <message>
        <source>The collection to add to: pick one, or type a new name</source>
        <translation>要添加到的资料库：选一个，或输入新名字</translation>
    </message>
    <message>
        <source>Collection name</source>
        <translation>资料库名称</translation>
    </message>
    <message>
        <source>Add folder…</source>
        <translation>添加文件夹…</translation>
    </message>
    <message>
        <source>Add files…</source>
        <translation>添加文件…</translation>
    </message>
    <message>
        <source>Re-index</source>
        <translation>重新索引</translation>
    </message>
    <message>
        <source>Walk the selected collection&apos;s folders and files again: new files are added, changed ones read again, vanished ones removed</source>
        <translation>重新检查所选资料库的文件夹和文件：添加新文件，重新读取改动过的文件，移除已消失的文件</translation>
    </message>
    <message>
        <source>Remove</source>
        <translation>移除</translation>
    </message>
    <message>
        <source>Forget the selected collection (your files are not touched)</source>
        <translation>移除所选资料库（不会动你的文件）</translation>
    </message>
    <message>
        <source>Cancel</source>
        <translation>取消</translation>
    </message>
    <message>
        <source>Stop after the file being read; what was indexed stays</source>
        <translation>读完当前文件后停止；已索引的内容保留</translation>
    </message>
    <message>
        <source>Files that could not be indexed are listed here, one line each.</source>
        <translation>无法索引的文件会列在这里，每个一行。</translation>
    </message>
    <message>
        <source>Indexing log</source>
        <translation>索引日志</translation>
    </message>
    <message>
        <source>notes</source>
        <translation>笔记</translation>
    </message>
    <message>
        <source>Name the collection to add to first.</source>
        <translation>请先填写要添加到的资料库名称。</translation>
    </message>
    <message>
        <source>Add a folder to the collection</source>
        <translation>向资料库添加文件夹</translation>
    </message>
    <message>
        <source>Add files to the collection</source>
        <translation>向资料库添加文件</translation>
    </message>
    <message>
        <source>Documents (*.txt *.md *.pdf *.docx *.html *.htm *.csv *.json *.py *.js *.ts *.c *.cpp *.h *.java *.go *.rs);;All files (*)</source>
        <translation>文档 (*.txt *.md *.pdf *.docx *.html *.htm *.csv *.json *.py *.js *.ts *.c *.cpp *.h *.java *.go *.rs);;所有文件 (*)</translation>
    </message>
    <message>
        <source>Remove collection</source>
        <translation>移除资料库</translation>
    </message>
    <message>
        <source>Remove the collection “{name}” and everything indexed in it? Your files are not touched; conversations that answer from it stop doing so.</source>
        <translation>移除资料库“{name}”及其全部索引内容？不会动你的文件；依据它回答的对话将不再使用它。</translation>
    </message>
    <message>
        <source>Removing “{name}”…</source>
        <translation>正在移除“{name}”…</translation>
    </message>
    <message>
        <source>Cancelling after the file being read…</source>
        <translation>读完当前文件后取消…</translation>
    </message>
    <message>
        <source>Indexing “{name}”: looking for files…</source>
        <translation>正在索引“{name}”：查找文件…</translation>
    </message>
    <message>
        <source>Indexing “{name}”: {done} / {total} files · {file}</source>
        <translation>正在索引“{name}”：{done} / {total} 个文件 · {file}</translation>
    </message>
    <message>
        <source>Removed “{name}”.</source>
        <translation>已移除“{name}”。</translation>
    </message>
    <message>
        <source>Indexing “{name}” failed: see the log.</source>
        <translation>索引“{name}”失败：请看日志。</translation>
    </message>
    <message>
        <source>Cancelled: “{name}” keeps the {n} files indexed before the cancel.</source>
        <translation>已取消：“{name}”保留取消前已索引的 {n} 个文件。</translation>
    </message>
    <message>
        <source>“{name}” is up to date: {added} added, {updated} updated, {unchanged} unchanged, {removed} removed, {failed} skipped, in {seconds:.1f} s.</source>
        <translation>“{name}”已是最新：新增 {added}，更新 {updated}，未变 {unchanged}，移除 {removed}，跳过 {failed}，用时 {seconds:.1f} s。</translation>
    </message>
</context>
<context>
    <name>CompletionView</name>
    <message>
        <source>Complete text</source>
        <translation>续写文本</translation>
    </message>
    <message>
        <source>Write the beginning of a text; the model continues it.</source>
        <translation>写下一段文字的开头，模型会接着往下写。</translation>
    </message>
    <message>
        <source>The text to continue</source>
        <translation>要续写的文本</translation>
    </message>
    <message>
        <source>Continue</source>
        <translation>续写</translation>
    </message>
    <message>
        <source>Let the model continue the text from its end</source>
        <translation>让模型从文本末尾接着往下写</translation>
    </message>
    <message>
        <source>Stop</source>
        <translation>停止</translation>
    </message>
    <message>
        <source>Complete text…</source>
        <translation>续写文本…</translation>
    </message>
    <message>
        <source>No model loaded: choose a model in the main window and press Load.</source>
        <translation>尚未加载模型：请在主窗口中选择模型并点击“加载”。</translation>
    </message>
    <message>
        <source>Write something to continue first.</source>
        <translation>请先写点内容，再让模型续写。</translation>
    </message>
    <message>
        <source>The reply settings cannot be used: {why}</source>
        <translation>回复设置无法使用：{why}</translation>
    </message>
    <message>
        <source>Continuing…</source>
        <translation>正在续写…</translation>
    </message>
    <message>
        <source>The model ended the text.</source>
        <translation>模型已结束这段文本。</translation>
    </message>
    <message>
        <source>The max new tokens limit was reached: press Continue for more.</source>
        <translation>已达到最大生成 token 数：点击“续写”可以接着写。</translation>
    </message>
    <message>
        <source>Stopped.</source>
        <translation>已停止。</translation>
    </message>
    <message>
        <source>History not saved: {why}</source>
        <translation>历史记录未保存：{why}</translation>
    </message>
    <message>
        <source>This model has no chat template, so it cannot chat: it continues text instead. Use Chat → Complete text…</source>
        <translation>此模型没有对话模板，无法对话，只能续写文本。请使用“对话 → 续写文本…”。</translation>
    </message>
</context>
<context>
    <name>Composer</name>
    <message>
        <source>Editing a message: Send replaces it and every later message.</source>
        <translation>正在编辑消息：发送后将替换这条消息及其后的所有消息。</translation>
    </message>
    <message>
        <source>Attach…</source>
        <translation>附加…</translation>
    </message>
    <message>
        <source>Attach files to answer from (or drop them here): text, Markdown, PDF, Word, HTML, CSV, JSON, code</source>
        <translation type="vanished">附加要据以回答的文件（或拖放到这里）：文本、Markdown、PDF、Word、HTML、CSV、JSON、代码</translation>
    </message>
    <message>
        <source>Attach files to answer from, or pictures to ask about (or drop or paste them here): text, Markdown, PDF, Word, HTML, CSV, JSON, code; PNG, JPEG, GIF, WebP, BMP</source>
        <translation>附加要据以回答的文件，或要询问的图片（也可拖放或粘贴到这里）：文本、Markdown、PDF、Word、HTML、CSV、JSON、代码；PNG、JPEG、GIF、WebP、BMP</translation>
    </message>
    <message>
        <source>Send</source>
        <translation>发送</translation>
    </message>
    <message>
        <source>Send (Enter)</source>
        <translation>发送（Enter）</translation>
    </message>
    <message>
        <source>Stop</source>
        <translation>停止</translation>
    </message>
    <message>
        <source>Stop the reply or the load (Esc)</source>
        <translation>停止生成回复或加载模型（Esc）</translation>
    </message>
    <message>
        <source>Cancel edit</source>
        <translation>取消编辑</translation>
    </message>
    <message>
        <source>Keep the message as it was</source>
        <translation>保留消息原样</translation>
    </message>
    <message>
        <source>Attach files</source>
        <translation>附加文件</translation>
    </message>
    <message>
        <source>Documents and images (*.txt *.md *.pdf *.docx *.html *.htm *.csv *.json *.py *.js *.ts *.c *.cpp *.h *.java *.go *.rs *.png *.jpg *.jpeg *.gif *.webp *.bmp);;Images (*.png *.jpg *.jpeg *.gif *.webp *.bmp);;All files (*)</source>
        <translation>文档和图片 (*.txt *.md *.pdf *.docx *.html *.htm *.csv *.json *.py *.js *.ts *.c *.cpp *.h *.java *.go *.rs *.png *.jpg *.jpeg *.gif *.webp *.bmp);;图片 (*.png *.jpg *.jpeg *.gif *.webp *.bmp);;所有文件 (*)</translation>
    </message>
    <message>
        <source>Documents (*.txt *.md *.pdf *.docx *.html *.htm *.csv *.json *.py *.js *.ts *.c *.cpp *.h *.java *.go *.rs);;All files (*)</source>
        <translation type="vanished">文档 (*.txt *.md *.pdf *.docx *.html *.htm *.csv *.json *.py *.js *.ts *.c *.cpp *.h *.java *.go *.rs);;所有文件 (*)</translation>
    </message>
</context>
<context>
    <name>ConversationList</name>
    <message>
        <source>Search titles and messages</source>
        <translation>搜索标题和消息</translation>
    </message>
    <message>
        <source>New</source>
        <translation>新建</translation>
    </message>
    <message>
        <source>Start a new conversation (Ctrl+N)</source>
        <translation>开始新对话（Ctrl+N）</translation>
    </message>
    <message>
        <source>Rename</source>
        <translation>重命名</translation>
    </message>
    <message>
        <source>Rename the selected conversation (F2)</source>
        <translation>重命名所选对话（F2）</translation>
    </message>
    <message>
        <source>Delete</source>
        <translation>删除</translation>
    </message>
    <message>
        <source>Delete the selected conversation (Delete)</source>
        <translation>删除所选对话（Delete）</translation>
    </message>
    <message>
        <source>Export</source>
        <translation>导出</translation>
    </message>
    <message>
        <source>Conversation as Markdown…</source>
        <translation>将对话导出为 Markdown…</translation>
    </message>
    <message>
        <source>Conversation as JSON…</source>
        <translation>将对话导出为 JSON…</translation>
    </message>
    <message>
        <source>All performance records as CSV…</source>
        <translation>将全部性能记录导出为 CSV…</translation>
    </message>
    <message>
        <source>Export the selected conversation, or every performance record</source>
        <translation>导出所选对话，或全部性能记录</translation>
    </message>
    <message>
        <source>Search conversations</source>
        <translation>搜索对话</translation>
    </message>
    <message>
        <source>Conversations</source>
        <translation>对话列表</translation>
    </message>
    <message>
        <source>Newest first; Delete deletes the selected one, F2 renames it</source>
        <translation>最新的在前；按 Delete 删除所选对话，按 F2 重命名</translation>
    </message>
    <message>
        <source>History is read-only: it was written by a newer Miaohui</source>
        <translation>历史记录为只读：它由更新版本的秒回写入</translation>
    </message>
    <message>
        <source>Cannot read history: {why}</source>
        <translation>无法读取历史记录：{why}</translation>
    </message>
    <message>
        <source>No conversation matches.</source>
        <translation>没有匹配的对话。</translation>
    </message>
    <message>
        <source>No conversations yet.</source>
        <translation>还没有对话。</translation>
    </message>
    <message>
        <source>New chat</source>
        <translation>新对话</translation>
    </message>
    <message>
        <source>{title}
{n} messages · updated {updated}</source>
        <translation>{title}
{n} 条消息 · 更新于 {updated}</translation>
    </message>
    <message>
        <source>Fork of a deleted chat</source>
        <translation>分支自一个已删除的对话</translation>
    </message>
    <message>
        <source>Fork of “{source}”</source>
        <translation>分支自“{source}”</translation>
    </message>
    <message>
        <source>Rename conversation</source>
        <translation>重命名对话</translation>
    </message>
    <message>
        <source>Title:</source>
        <translation>标题：</translation>
    </message>
    <message>
        <source>Delete conversation</source>
        <translation>删除对话</translation>
    </message>
    <message>
        <source>Delete “{title}” and all its messages? This cannot be undone.</source>
        <translation>删除“{title}”及其全部消息？此操作无法撤销。</translation>
    </message>
    <message>
        <source>Export conversation</source>
        <translation>导出对话</translation>
    </message>
    <message>
        <source>Export performance records</source>
        <translation>导出性能记录</translation>
    </message>
    <message>
        <source>Could not export to {path}: {reason}. A file already there is unchanged.</source>
        <translation>无法导出到 {path}：{reason}。原有的文件未被改动。</translation>
    </message>
</context>
<context>
    <name>DefaultModelNote</name>
    <message>
        <source>The default model, {name}, is tiny (135 M parameters): it is here to watch how the engine works, and its answers are often wrong (it may name Sydney as Australia&apos;s capital, or answer Chinese in English). For real answers, get a better model: Models… → Recommended lists the ones that fit this computer.</source>
        <translation>默认模型 {name} 非常小（1.35 亿参数）：它是用来观察推理引擎如何工作的，回答常常是错的（可能说悉尼是澳大利亚的首都，或用英文回答中文问题）。想要真正可用的回答，请换一个更好的模型：“模型管理… → 推荐”列出了适合本机的模型。</translation>
    </message>
    <message>
        <source>Show better models</source>
        <translation>查看更好的模型</translation>
    </message>
    <message>
        <source>Open Models… on its Recommended tab: real chat models ranked for this computer.</source>
        <translation>打开“模型管理…”的“推荐”页：按本机情况排序、真正能对话的模型。</translation>
    </message>
    <message>
        <source>Got it</source>
        <translation>知道了</translation>
    </message>
    <message>
        <source>Hide this note; it will not be shown again.</source>
        <translation>隐藏这条提示；以后不再显示。</translation>
    </message>
    <message>
        <source>About the default model</source>
        <translation>关于默认模型</translation>
    </message>
</context>
<context>
    <name>DocsChoiceButton</name>
    <message>
        <source>Auto: attached files whole when they fit, else passages</source>
        <translation>自动：放得下时附件全文，否则检索段落</translation>
    </message>
    <message>
        <source>Whole text of attached files</source>
        <translation>附件全文</translation>
    </message>
    <message>
        <source>Retrieved passages</source>
        <translation>检索段落</translation>
    </message>
    <message>
        <source>Answer from collections</source>
        <translation>依据资料库回答</translation>
    </message>
    <message>
        <source>No collections yet</source>
        <translation>还没有资料库</translation>
    </message>
    <message>
        <source>Documents</source>
        <translation>文档</translation>
    </message>
    <message>
        <source>Manage collections…</source>
        <translation>管理资料库…</translation>
    </message>
    <message>
        <source>Collections</source>
        <translation>资料库</translation>
    </message>
    <message>
        <source>This conversation answers from: {names}. Documents: {mode}</source>
        <translation>此对话依据：{names}。文档：{mode}</translation>
    </message>
    <message>
        <source>Pick collections this conversation answers from. Documents: {mode}</source>
        <translation>为此对话选择要依据的资料库。文档：{mode}</translation>
    </message>
    <message>
        <source>Collections and documents mode</source>
        <translation>资料库和文档方式</translation>
    </message>
</context>
<context>
    <name>DocsForecast</name>
    <message>
        <source>keywords and embeddings</source>
        <translation>关键词加向量</translation>
    </message>
    <message>
        <source>keywords only</source>
        <translation>仅关键词</translation>
    </message>
    <message>
        <source>TTFT after the first reply</source>
        <translation>首次回复后预测 TTFT</translation>
    </message>
    <message>
        <source>TTFT ≈ %1</source>
        <translation>TTFT ≈ %1</translation>
    </message>
    <message>
        <source>%1 tokens to prefill (%2 cached)</source>
        <translation>需预填充 %1 个 token（已缓存 %2 个）</translation>
    </message>
    <message>
        <source>%1 tokens to prefill</source>
        <translation>需预填充 %1 个 token</translation>
    </message>
    <message>
        <source>Whole text: %1 · %2</source>
        <translation>全文：%1 · %2</translation>
    </message>
    <message>
        <source>does not fit</source>
        <translation>放不下</translation>
    </message>
    <message>
        <source>Retrieved passages (%1): %2 · %3</source>
        <translation>检索段落（%1 段）：%2 · %3</translation>
    </message>
    <message>
        <source>Retrieved passages: none fits the %1 tokens left</source>
        <translation>检索段落：剩余的 %1 个 token 放不下任何一段</translation>
    </message>
    <message>
        <source>Auto uses the whole text: it fits the context.</source>
        <translation>自动：使用全文，上下文放得下。</translation>
    </message>
    <message>
        <source>Auto uses retrieved passages: the whole text adds %1 tokens but only %2 fit beside the conversation and the reply.</source>
        <translation>自动：使用检索段落。全文要加入 %1 个 token，但对话和回复之外只剩 %2 个。</translation>
    </message>
    <message>
        <source>Retrieved passages are used: a collection is searched, not put in whole.</source>
        <translation>使用检索段落：资料集只做检索，不放入全文。</translation>
    </message>
    <message>
        <source>Whole text is used (chosen for this conversation).</source>
        <translation>使用全文（本对话已选定）。</translation>
    </message>
    <message>
        <source>The whole text adds %1 tokens but only %2 fit: sending it will be refused; choose Auto or Retrieved passages.</source>
        <translation>全文要加入 %1 个 token，但只放得下 %2 个：发送会被拒绝；请选择“自动”或“检索段落”。</translation>
    </message>
    <message>
        <source>Retrieved passages are used (chosen for this conversation).</source>
        <translation>使用检索段落（本对话已选定）。</translation>
    </message>
    <message>
        <source>No retrieved passage fits the %1 tokens left beside the conversation and the reply: shorten the question or the reply.</source>
        <translation>对话和回复之外剩余的 %1 个 token 放不下任何检索段落：请缩短问题或回复。</translation>
    </message>
    <message>
        <source>Sources may add %1 tokens beside the conversation and the reply.</source>
        <translation>对话和回复之外，资料最多可加入 %1 个 token。</translation>
    </message>
    <message>
        <source>Whole text: %1 pages or files, %2 tokens added.</source>
        <translation>全文：%1 页或文件，加入 %2 个 token。</translation>
    </message>
    <message>
        <source>Retrieved: %1 passages, %2 tokens added; the search took %3 (%4).</source>
        <translation>检索：%1 段，加入 %2 个 token；检索用时 %3（%4）。</translation>
    </message>
    <message>
        <source>TTFT: the tokens the KV cache does not hold ÷ the median prefill rate of recent replies of this model.</source>
        <translation>TTFT：KV 缓存中没有的 token 数 ÷ 该模型最近几次回复的预填充速度中位数。</translation>
    </message>
</context>
<context>
    <name>DownloadPanel</name>
    <message>
        <source>Pause</source>
        <translation>暂停</translation>
    </message>
    <message>
        <source>Stop now and keep what arrived: resume it later from the Installed tab</source>
        <translation>立即停止并保留已下载的部分：之后可在“已安装”标签页中继续</translation>
    </message>
    <message>
        <source>Cancel</source>
        <translation>取消</translation>
    </message>
    <message>
        <source>Stop now and delete what arrived</source>
        <translation>立即停止并删除已下载的部分</translation>
    </message>
    <message>
        <source>Downloading {model}</source>
        <translation>正在下载 {model}</translation>
    </message>
    <message>
        <source>Reading the file list and checking free disk space…</source>
        <translation>正在读取文件列表并检查可用磁盘空间…</translation>
    </message>
    <message>
        <source>Pausing…</source>
        <translation>正在暂停…</translation>
    </message>
    <message>
        <source>Cancelling…</source>
        <translation>正在取消…</translation>
    </message>
    <message>
        <source>{rate}/s</source>
        <translation>{rate}/s</translation>
    </message>
    <message>
        <source>{time} left</source>
        <translation>剩余 {time}</translation>
    </message>
    <message>
        <source>time left: measuring</source>
        <translation>剩余时间：测算中</translation>
    </message>
    <message>
        <source>{done} of {total} ({share:.0%}) · {speed} · {left} · {file}</source>
        <translation>{done} / {total}（{share:.0%}）· {speed} · {left} · {file}</translation>
    </message>
    <message>
        <source>{s} s</source>
        <translation>{s} s</translation>
    </message>
    <message>
        <source>{m} min {s} s</source>
        <translation>{m} min {s} s</translation>
    </message>
    <message>
        <source>{h} h {m} min</source>
        <translation>{h} h {m} min</translation>
    </message>
    <message>
        <source>The download of {model} was cancelled; nothing was installed.</source>
        <translation>{model} 的下载已取消，未安装任何内容。</translation>
    </message>
    <message>
        <source> at {done} of {total}</source>
        <translation>（已下载 {done} / {total}）</translation>
    </message>
    <message>
        <source>The download of {model} is paused{got}: resume it from the Installed tab.</source>
        <translation>{model} 的下载已暂停{got}：可在“已安装”标签页中继续。</translation>
    </message>
</context>
<context>
    <name>FitPanel</name>
    <message>
        <source>Will it fit? (estimated before downloading, from the config alone)</source>
        <translation>放得下吗？（下载前仅凭配置文件估算）</translation>
    </message>
    <message>
        <source>Select a model to see whether it fits in this machine&apos;s memory.</source>
        <translation>选择一个模型，看看本机内存是否放得下。</translation>
    </message>
    <message>
        <source>Context length</source>
        <translation>上下文长度</translation>
    </message>
    <message>
        <source> tokens</source>
        <translation> 个 token</translation>
    </message>
    <message>
        <source>How many tokens of conversation the KV cache must hold</source>
        <translation>KV 缓存需要容纳多少个 token 的对话</translation>
    </message>
    <message>
        <source>Half the context</source>
        <translation>上下文减半</translation>
    </message>
    <message>
        <source>Twice the context (up to the model&apos;s limit)</source>
        <translation>上下文加倍（不超过模型上限）</translation>
    </message>
    <message>
        <source>Measure again</source>
        <translation>重新测量</translation>
    </message>
    <message>
        <source>Read this machine&apos;s free memory again</source>
        <translation>重新读取本机的可用内存</translation>
    </message>
    <message>
        <source>Precision</source>
        <translation>精度</translation>
    </message>
    <message>
        <source>Weights</source>
        <translation>权重</translation>
    </message>
    <message>
        <source>KV cache</source>
        <translation>KV 缓存</translation>
    </message>
    <message>
        <source>Total needed</source>
        <translation>共需</translation>
    </message>
    <message>
        <source>Free memory</source>
        <translation>可用内存</translation>
    </message>
    <message>
        <source>Verdict</source>
        <translation>结论</translation>
    </message>
    <message>
        <source>Memory needed per precision</source>
        <translation>各精度所需内存</translation>
    </message>
    <message>
        <source>{free} free on {device}</source>
        <translation>{device} 可用 {free}</translation>
    </message>
    <message>
        <source>int8 KV cache at {n} tokens</source>
        <translation>{n} 个 token 时的 int8 KV 缓存</translation>
    </message>
    <message>
        <source>KV cache at {n} tokens</source>
        <translation>{n} 个 token 时的 KV 缓存</translation>
    </message>
    <message>
        <source>needs bitsandbytes, which is not installed</source>
        <translation>需要 bitsandbytes，但尚未安装</translation>
    </message>
    <message>
        <source>  (auto)</source>
        <translation>（自动）</translation>
    </message>
    <message>
        <source>{kv} B ({per} B per token)</source>
        <translation>{kv} B（每个 token {per} B）</translation>
    </message>
    <message>
        <source>cannot load: {why}</source>
        <translation>无法加载：{why}</translation>
    </message>
    <message>
        <source>fits</source>
        <translation>放得下</translation>
    </message>
    <message>
        <source>tight</source>
        <translation>偏紧</translation>
    </message>
    <message>
        <source>will not fit</source>
        <translation>放不下</translation>
    </message>
    <message>
        <source>Parameters: {formula}. The seeds&apos; estimate V·d + 12·L·d² gives {estimate}.</source>
        <translation>参数量：{formula}。原文的估算式 V·d + 12·L·d² 得出 {estimate}。</translation>
    </message>
    <message>
        <source>KV cache in {precision}: {formula}. Without GQA (2 · L · context · d · bytes): {no_gqa}.</source>
        <translation>{precision} 精度下的 KV 缓存：{formula}。不用 GQA 时（2 · L · 上下文长度 · d · 每元素字节数）：{no_gqa}。</translation>
    </message>
    <message>
        <source>Total: {weights} weights + {kv} KV + {working} working = {total} against {free} free ({device}): {verdict}.</source>
        <translation>合计：权重 {weights} + KV {kv} + 运行开销 {working} = {total}，可用 {free}（{device}）：{verdict}。</translation>
    </message>
    <message>
        <source>Rule: {rule}.</source>
        <translation>判定规则：{rule}。</translation>
    </message>
    <message>
        <source>Download: {size}.</source>
        <translation>下载大小：{size}。</translation>
    </message>
</context>
<context>
    <name>Forker</name>
    <message>
        <source>This chat is not saved in the history, so it cannot be forked.</source>
        <translation>此对话未保存在历史记录中，无法分支。</translation>
    </message>
    <message>
        <source>%1 (fork)</source>
        <translation>%1（分支）</translation>
    </message>
    <message>
        <source>Could not fork this chat: %1</source>
        <translation>无法为此对话创建分支：%1</translation>
    </message>
    <message>
        <source>Forked into a new chat; the original is unchanged.</source>
        <translation>已分支为新对话，原对话保持不变。</translation>
    </message>
</context>
<context>
    <name>HubToken</name>
    <message>
        <source>The token could not be saved in the keyring ({error}); it is kept until Miaohui closes.</source>
        <translation>无法将令牌保存到钥匙串（{error}）；它会保留到秒回关闭为止。</translation>
    </message>
    <message>
        <source>No system keyring: the token is kept until Miaohui closes, never written to a file.</source>
        <translation>没有系统钥匙串：令牌只保留到秒回关闭为止，绝不会写入文件。</translation>
    </message>
</context>
<context>
    <name>HubTokenRow</name>
    <message>
        <source>Hugging Face token:</source>
        <translation>Hugging Face 令牌：</translation>
    </message>
    <message>
        <source>hf_… (only for gated models such as Llama and Gemma)</source>
        <translation>hf_…（仅用于 Llama、Gemma 等需授权的模型）</translation>
    </message>
    <message>
        <source>Hugging Face token</source>
        <translation>Hugging Face 令牌</translation>
    </message>
    <message>
        <source>Save token</source>
        <translation>保存令牌</translation>
    </message>
    <message>
        <source>Kept in the system keyring and sent only to the Hugging Face endpoint above, for gated models whose licence that account accepted.</source>
        <translation>保存在系统钥匙串中，只发送给上面的 Hugging Face 地址，用于该账号已接受许可协议的需授权模型。</translation>
    </message>
    <message>
        <source>Forget</source>
        <translation>删除</translation>
    </message>
    <message>
        <source>Remove the token from the keyring</source>
        <translation>从钥匙串中删除令牌</translation>
    </message>
    <message>
        <source>A token is kept for gated models.</source>
        <translation>已保存用于需授权模型的令牌。</translation>
    </message>
    <message>
        <source>No token: gated models cannot be downloaded.</source>
        <translation>没有令牌：无法下载需授权的模型。</translation>
    </message>
</context>
<context>
    <name>ImageDialog</name>
    <message>
        <source>Picture</source>
        <translation>图片</translation>
    </message>
    <message>
        <source>Picture {width}×{height}</source>
        <translation>图片 {width}×{height}</translation>
    </message>
</context>
<context>
    <name>ImageStrip</name>
    <message>
        <source>picture missing from the images folder</source>
        <translation>图片已不在图片文件夹中</translation>
    </message>
    <message>
        <source>{width}×{height}: click to see it full size</source>
        <translation>{width}×{height}：点击查看原图</translation>
    </message>
    <message>
        <source>Picture {name}</source>
        <translation>图片 {name}</translation>
    </message>
</context>
<context>
    <name>ImageTurns</name>
    <message>
        <source>{model} cannot see pictures: load a vision-language model (LLaVA, SmolVLM, Qwen2.5-VL, Gemma 3…) to ask about them. They stay attached.</source>
        <translation>{model} 看不到图片：请加载视觉语言模型（LLaVA、SmolVLM、Qwen2.5-VL、Gemma 3…）来询问它们。图片仍保留在附件中。</translation>
    </message>
    <message>
        <source>Load a vision-language model (LLaVA, SmolVLM, Qwen2.5-VL, Gemma 3…) to ask about the attached pictures.</source>
        <translation>请加载视觉语言模型（LLaVA、SmolVLM、Qwen2.5-VL、Gemma 3…）来询问附加的图片。</translation>
    </message>
</context>
<context>
    <name>InstalledTab</name>
    <message>
        <source>Model</source>
        <translation>模型</translation>
    </message>
    <message>
        <source>Format</source>
        <translation>格式</translation>
    </message>
    <message>
        <source>Size on disk</source>
        <translation>磁盘占用</translation>
    </message>
    <message>
        <source>Parameters</source>
        <translation>参数量</translation>
    </message>
    <message>
        <source>Loads in</source>
        <translation>可加载精度</translation>
    </message>
    <message>
        <source>From</source>
        <translation>来源</translation>
    </message>
    <message>
        <source>Last used</source>
        <translation>上次使用</translation>
    </message>
    <message>
        <source>Installed models</source>
        <translation>已安装的模型</translation>
    </message>
    <message>
        <source>No models here yet. Allow downloads and search Hugging Face, or run `python -m engine fetch` for the default model.</source>
        <translation>这里还没有模型。可以允许下载并搜索 Hugging Face，或运行 `python -m engine fetch` 获取默认模型。</translation>
    </message>
    <message>
        <source>Use this model</source>
        <translation>使用此模型</translation>
    </message>
    <message>
        <source>Open folder</source>
        <translation>打开文件夹</translation>
    </message>
    <message>
        <source>Refresh</source>
        <translation>刷新</translation>
    </message>
    <message>
        <source>Delete…</source>
        <translation>删除…</translation>
    </message>
    <message>
        <source>Downloads that stopped part-way</source>
        <translation>中途停止的下载</translation>
    </message>
    <message>
        <source>Downloaded</source>
        <translation>已下载</translation>
    </message>
    <message>
        <source>Paused downloads</source>
        <translation>已暂停的下载</translation>
    </message>
    <message>
        <source>Resume</source>
        <translation>继续下载</translation>
    </message>
    <message>
        <source>Discard…</source>
        <translation>丢弃…</translation>
    </message>
    <message>
        <source>Models folder: {folder}</source>
        <translation>模型文件夹：{folder}</translation>
    </message>
    <message>
        <source>Could not read the models folder: {why}</source>
        <translation>无法读取模型文件夹：{why}</translation>
    </message>
    <message>
        <source>last</source>
        <translation>最近一次</translation>
    </message>
    <message>
        <source>{n} models ago</source>
        <translation>{n} 个模型之前</translation>
    </message>
    <message>
        <source>  ★ default</source>
        <translation>  ★ 默认</translation>
    </message>
    <message>
        <source>unreadable: {why}</source>
        <translation>无法读取：{why}</translation>
    </message>
    <message>
        <source>  (being downloaded by process {pid})</source>
        <translation>（进程 {pid} 正在下载）</translation>
    </message>
    <message>
        <source>{done} of {total}</source>
        <translation>{done} / {total}</translation>
    </message>
    <message>
        <source>Continue from where it stopped</source>
        <translation>从中断处继续</translation>
    </message>
    <message>
        <source>Allow downloads (and let any other download finish) to resume</source>
        <translation>要继续下载，请先允许下载（并等其他下载完成）</translation>
    </message>
    <message>
        <source>Could not open {folder}: no file manager answered.</source>
        <translation>无法打开 {folder}：没有文件管理器响应。</translation>
    </message>
    <message>
        <source>Delete {name} ({size}) from disk?

{path}</source>
        <translation>从磁盘删除 {name}（{size}）？

{path}</translation>
    </message>
    <message>
        <source>This is the default model. Without it Miaohui starts with no model until you choose another one or fetch it again (python -m engine fetch).</source>
        <translation>这是默认模型。删除后，秒回启动时将没有可用的模型，直到你选择其他模型或重新获取它（python -m engine fetch）。</translation>
    </message>
    <message>
        <source>Delete model</source>
        <translation>删除模型</translation>
    </message>
    <message>
        <source>Could not delete {name}: {why}</source>
        <translation>无法删除 {name}：{why}</translation>
    </message>
    <message>
        <source>Deleted {path}.</source>
        <translation>已删除 {path}。</translation>
    </message>
    <message>
        <source>Discard the partial download of {model} ({size} so far)?</source>
        <translation>丢弃 {model} 未完成的下载（目前已下载 {size}）？</translation>
    </message>
    <message>
        <source>Discard download</source>
        <translation>丢弃下载</translation>
    </message>
    <message>
        <source>Could not discard it: {why}</source>
        <translation>无法丢弃：{why}</translation>
    </message>
</context>
<context>
    <name>KVDiskRow</name>
    <message>
        <source>Keys and values of conversations closed earlier, so reopening one does not compute it all again; the least recently used go first when the limit is reached</source>
        <translation>先前关闭的对话的键和值，重新打开对话时就不必全部重新计算；达到上限时，最久未使用的最先删除</translation>
    </message>
    <message>
        <source>Clear</source>
        <translation>清空</translation>
    </message>
    <message>
        <source>Delete every saved KV cache: reopened conversations compute their history again, nothing else is lost</source>
        <translation>删除所有已保存的 KV 缓存：重新打开的对话会重新计算其历史内容，其他内容都不会丢失</translation>
    </message>
    <message>
        <source>{used} on disk (at most {budget})</source>
        <translation>磁盘占用 {used}（最多 {budget}）</translation>
    </message>
</context>
<context>
    <name>LabNames</name>
    <message>
        <source>Run</source>
        <translation>运行序号</translation>
    </message>
    <message>
        <source>Runs</source>
        <translation>运行次数</translation>
    </message>
    <message>
        <source>Tokens generated</source>
        <translation>已生成 token 数</translation>
    </message>
    <message>
        <source>Prompt tokens</source>
        <translation>提示词 token 数</translation>
    </message>
    <message>
        <source>Tokens prefilled</source>
        <translation>预填充 token 数</translation>
    </message>
    <message>
        <source>Tokens reused from the cache</source>
        <translation>从缓存复用的 token 数</translation>
    </message>
    <message>
        <source>New tokens asked for</source>
        <translation>请求生成的 token 数</translation>
    </message>
    <message>
        <source>Time to first token (s)</source>
        <translation>首 token 延迟（s）</translation>
    </message>
    <message>
        <source>Total time (s)</source>
        <translation>总耗时（s）</translation>
    </message>
    <message>
        <source>Prefill time (s)</source>
        <translation>预填充耗时（s）</translation>
    </message>
    <message>
        <source>Prefill speed (tok/s)</source>
        <translation>预填充速度（tok/s）</translation>
    </message>
    <message>
        <source>Average speed, TTFT included (tok/s)</source>
        <translation>平均速度，含首 token 延迟（tok/s）</translation>
    </message>
    <message>
        <source>Decode speed (tok/s)</source>
        <translation>解码速度（tok/s）</translation>
    </message>
    <message>
        <source>Language</source>
        <translation>语言</translation>
    </message>
    <message>
        <source>Characters asked for</source>
        <translation>目标字符数</translation>
    </message>
    <message>
        <source>Characters</source>
        <translation>字符数</translation>
    </message>
    <message>
        <source>Token position</source>
        <translation>token 位置</translation>
    </message>
    <message>
        <source>KV cache on (ms per token)</source>
        <translation>开启 KV 缓存（ms/token）</translation>
    </message>
    <message>
        <source>KV cache off (ms per token)</source>
        <translation>关闭 KV 缓存（ms/token）</translation>
    </message>
    <message>
        <source>Off ÷ on</source>
        <translation>关 ÷ 开</translation>
    </message>
    <message>
        <source>KV cache on, early tokens (ms per token)</source>
        <translation>开启 KV 缓存，前段 token（ms/token）</translation>
    </message>
    <message>
        <source>KV cache on, late tokens (ms per token)</source>
        <translation>开启 KV 缓存，后段 token（ms/token）</translation>
    </message>
    <message>
        <source>KV cache off, early tokens (ms per token)</source>
        <translation>关闭 KV 缓存，前段 token（ms/token）</translation>
    </message>
    <message>
        <source>KV cache off, late tokens (ms per token)</source>
        <translation>关闭 KV 缓存，后段 token（ms/token）</translation>
    </message>
    <message>
        <source>KV cache on, growth per token (ms)</source>
        <translation>开启 KV 缓存，每个 token 的增幅（ms）</translation>
    </message>
    <message>
        <source>KV cache off, growth per token (ms)</source>
        <translation>关闭 KV 缓存，每个 token 的增幅（ms）</translation>
    </message>
    <message>
        <source>Off ÷ on, late tokens</source>
        <translation>关 ÷ 开，后段 token</translation>
    </message>
    <message>
        <source>Off ÷ on, on average</source>
        <translation>关 ÷ 开，平均</translation>
    </message>
    <message>
        <source>End to end, KV cache on (s)</source>
        <translation>端到端耗时，开启 KV 缓存（s）</translation>
    </message>
    <message>
        <source>End to end, KV cache off (s)</source>
        <translation>端到端耗时，关闭 KV 缓存（s）</translation>
    </message>
    <message>
        <source>Settings</source>
        <translation>设置</translation>
    </message>
    <message>
        <source>Seed</source>
        <translation>随机种子</translation>
    </message>
    <message>
        <source>Tokens</source>
        <translation>token 数</translation>
    </message>
    <message>
        <source>Repeated 3-grams (share)</source>
        <translation>重复的三元组（占比）</translation>
    </message>
    <message>
        <source>Distinct words (distinct-1)</source>
        <translation>不重复的词（distinct-1）</translation>
    </message>
    <message>
        <source>Distinct word pairs (distinct-2)</source>
        <translation>不重复的词对（distinct-2）</translation>
    </message>
    <message>
        <source>Text</source>
        <translation>文本</translation>
    </message>
    <message>
        <source>Precision</source>
        <translation>精度</translation>
    </message>
    <message>
        <source>Weights (MB)</source>
        <translation>权重（MB）</translation>
    </message>
    <message>
        <source>Load time (s)</source>
        <translation>加载耗时（s）</translation>
    </message>
    <message>
        <source>Greedy text</source>
        <translation>贪心解码文本</translation>
    </message>
    <message>
        <source>Finish</source>
        <translation>结束原因</translation>
    </message>
    <message>
        <source>Verdict</source>
        <translation>结论</translation>
    </message>
    <message>
        <source>Note</source>
        <translation>备注</translation>
    </message>
    <message>
        <source>Sentence</source>
        <translation>句子</translation>
    </message>
    <message>
        <source>Layer</source>
        <translation>层</translation>
    </message>
    <message>
        <source>Head</source>
        <translation>注意力头</translation>
    </message>
    <message>
        <source>Attention on the first token (share)</source>
        <translation>首个 token 上的注意力（占比）</translation>
    </message>
    <message>
        <source>Attention spread (normalised entropy)</source>
        <translation>注意力分散度（归一化熵）</translation>
    </message>
    <message>
        <source>Pronoun → its noun (attention)</source>
        <translation>代词 → 其所指名词（注意力）</translation>
    </message>
    <message>
        <source>Attention-sink threshold</source>
        <translation>注意力汇聚点（sink）阈值</translation>
    </message>
    <message>
        <source>Attention code while capturing</source>
        <translation>捕获时的注意力实现</translation>
    </message>
    <message>
        <source>Attention code afterwards</source>
        <translation>捕获后的注意力实现</translation>
    </message>
    <message>
        <source>Prompt</source>
        <translation>提示词</translation>
    </message>
    <message>
        <source>Drafter</source>
        <translation>草稿来源</translation>
    </message>
    <message>
        <source>Draft length (tokens)</source>
        <translation>草稿长度（token）</translation>
    </message>
    <message>
        <source>Speed-up over plain (×)</source>
        <translation>相对普通解码的加速比（×）</translation>
    </message>
    <message>
        <source>Drafts accepted (share)</source>
        <translation>被接受的草稿（占比）</translation>
    </message>
    <message>
        <source>Tokens per target step</source>
        <translation>目标模型每步 token 数</translation>
    </message>
    <message>
        <source>Same tokens as plain?</source>
        <translation>与普通解码的 token 相同？</translation>
    </message>
    <message>
        <source>Best speed-up (×)</source>
        <translation>最佳加速比（×）</translation>
    </message>
    <message>
        <source>Best draft length</source>
        <translation>最佳草稿长度</translation>
    </message>
    <message>
        <source>{name}, median</source>
        <translation>{name}，中位数</translation>
    </message>
    <message>
        <source>{name}, lowest</source>
        <translation>{name}，最小值</translation>
    </message>
    <message>
        <source>{name}, highest</source>
        <translation>{name}，最大值</translation>
    </message>
</context>
<context>
    <name>LabTab</name>
    <message>
        <source>quick</source>
        <translation>快速</translation>
    </message>
    <message>
        <source>fewer repetitions, lengths and tokens: seconds to a few minutes on a CPU</source>
        <translation>减少重复次数、长度档位和 token 数：在 CPU 上只需几秒到几分钟</translation>
    </message>
    <message>
        <source>layer </source>
        <translation>层 </translation>
    </message>
    <message>
        <source>head </source>
        <translation>头 </translation>
    </message>
    <message>
        <source>Run</source>
        <translation>运行</translation>
    </message>
    <message>
        <source>Cancel</source>
        <translation>取消</translation>
    </message>
    <message>
        <source>Load a model to run an experiment.</source>
        <translation>请先加载模型再运行实验。</translation>
    </message>
    <message>
        <source>Export CSV…</source>
        <translation>导出 CSV…</translation>
    </message>
    <message>
        <source>Export PNG…</source>
        <translation>导出 PNG…</translation>
    </message>
    <message>
        <source>Experiment</source>
        <translation>实验</translation>
    </message>
    <message>
        <source>The lab experiment to run</source>
        <translation>要运行的实验</translation>
    </message>
    <message>
        <source>Layer</source>
        <translation>层</translation>
    </message>
    <message>
        <source>The attention layer to draw</source>
        <translation>要绘制的注意力层</translation>
    </message>
    <message>
        <source>Head</source>
        <translation>注意力头</translation>
    </message>
    <message>
        <source>The attention head to draw</source>
        <translation>要绘制的注意力头</translation>
    </message>
    <message>
        <source>Experiment chart</source>
        <translation>实验图表</translation>
    </message>
    <message>
        <source>Experiment results</source>
        <translation>实验结果</translation>
    </message>
    <message>
        <source>The measured rows of the last run</source>
        <translation>上一次运行测得的各行数据</translation>
    </message>
    <message>
        <source>Findings</source>
        <translation>发现</translation>
    </message>
    <message>
        <source>What the last run shows, and its flags</source>
        <translation>上一次运行的结论及其标记</translation>
    </message>
    <message>
        <source>the engine is shutting down</source>
        <translation>推理引擎正在关闭</translation>
    </message>
    <message>
        <source>running {name}…</source>
        <translation>正在运行 {name}…</translation>
    </message>
    <message>
        <source>cancelling…</source>
        <translation>正在取消…</translation>
    </message>
    <message>
        <source>yes</source>
        <translation>是</translation>
    </message>
    <message>
        <source>no</source>
        <translation>否</translation>
    </message>
    <message>
        <source>table shows the first {shown} of {total} rows; the CSV has all</source>
        <translation>表格只显示 {total} 行中的前 {shown} 行；CSV 中有全部数据</translation>
    </message>
    <message>
        <source>This experiment temporarily loads other precisions of the model, one at a time; it needs extra memory and takes longer.</source>
        <translation>此实验会依次临时加载该模型的其他精度版本，需要额外内存，耗时也更长。</translation>
    </message>
    <message>
        <source>CSV files (*.csv)</source>
        <translation>CSV 文件 (*.csv)</translation>
    </message>
    <message>
        <source>PNG images (*.png)</source>
        <translation>PNG 图片 (*.png)</translation>
    </message>
    <message>
        <source>done</source>
        <translation>完成</translation>
    </message>
    <message>
        <source>Needs a model loaded on this computer: it uses the model&apos;s internals (its KV cache, attention weights or weights), which a server&apos;s API does not share.</source>
        <translation>需要在本机加载的模型：此实验要用到模型内部（KV 缓存、注意力权重或模型权重），服务器的 API 不提供这些。</translation>
    </message>
    <message>
        <source>Needs a vision-language model (LLaVA, SmolVLM, Qwen2.5-VL, Gemma 3…): load one to see what an image costs.</source>
        <translation>需要视觉语言模型（LLaVA、SmolVLM、Qwen2.5-VL、Gemma 3…）：加载一个即可查看一张图片的代价。</translation>
    </message>
    <message>
        <source>Runs on a text model: a vision-language model runs “What an image costs”.</source>
        <translation>此实验在文本模型上运行：视觉语言模型运行“一张图片的代价”。</translation>
    </message>
    <message>
        <source>Runs on a vision-language model from the command line only, for now: python -m engine lab --model FOLDER.</source>
        <translation type="vanished">需要视觉语言模型，目前只能在命令行运行：python -m engine lab --model 文件夹。</translation>
    </message>
    <message>
        <source>On the server {url} ({model}): timing and sampling run through its API and are measured here, network included; the others need a model loaded on this computer.</source>
        <translation>当前使用服务器 {url}（{model}）：计时和采样实验通过其 API 运行，在本机测量，包含网络耗时；其余实验需要在本机加载的模型。</translation>
    </message>
    <message>
        <source>Export</source>
        <translation>导出</translation>
    </message>
    <message>
        <source>could not write {path}: {why}</source>
        <translation>无法写入 {path}：{why}</translation>
    </message>
    <message>
        <source>saved {path}</source>
        <translation>已保存 {path}</translation>
    </message>
</context>
<context>
    <name>MainWindow</name>
    <message>
        <source>Model</source>
        <translation>模型</translation>
    </message>
    <message>
        <source>no model</source>
        <translation>未加载模型</translation>
    </message>
    <message>
        <source>idle</source>
        <translation>空闲</translation>
    </message>
    <message>
        <source>&amp;Chat</source>
        <translation>对话(&amp;C)</translation>
    </message>
    <message>
        <source>New chat</source>
        <translation>新对话</translation>
    </message>
    <message>
        <source>Stop</source>
        <translation>停止</translation>
    </message>
    <message>
        <source>Focus prompt</source>
        <translation>聚焦输入框</translation>
    </message>
    <message>
        <source>Settings…</source>
        <translation>设置…</translation>
    </message>
    <message>
        <source>Models…</source>
        <translation>模型管理…</translation>
    </message>
    <message>
        <source>Quit</source>
        <translation>退出</translation>
    </message>
    <message>
        <source>&amp;View</source>
        <translation>视图(&amp;V)</translation>
    </message>
    <message>
        <source>Run this model&apos;s own code?</source>
        <translation>运行此模型自带的代码？</translation>
    </message>
    <message>
        <source>{model}

This model ships Python code that would run on your computer with your permissions when it loads. Allow it only for a model from someone you trust.</source>
        <translation>{model}

此模型附带 Python 代码，加载时会以你的权限在这台电脑上运行。只有模型来自你信任的人时才应允许。</translation>
    </message>
    <message>
        <source>loading: {stage}</source>
        <translation>正在加载：{stage}</translation>
    </message>
    <message>
        <source>{n} oldest message left out to fit the {max}-token context window (the system prompt is kept).</source>
        <translation>为放进 {max} token 的上下文窗口，最早的 {n} 条消息没有送入模型（系统提示词保留）。</translation>
    </message>
    <message>
        <source>{n} oldest messages left out to fit the {max}-token context window (the system prompt is kept).</source>
        <translation>为放进 {max} token 的上下文窗口，最早的 {n} 条消息没有送入模型（系统提示词保留）。</translation>
    </message>
    <message>
        <source>· prefill {done}/{total} tokens</source>
        <translation type="vanished">· 预填充 {done}/{total} 个 token</translation>
    </message>
    <message>
        <source>· generating</source>
        <translation>· 正在生成</translation>
    </message>
    <message>
        <source>Could not load the model: {error}</source>
        <translation>无法加载模型：{error}</translation>
    </message>
    <message>
        <source>loading</source>
        <translation>正在加载</translation>
    </message>
    <message>
        <source>cancelling load…</source>
        <translation>正在取消加载…</translation>
    </message>
    <message>
        <source>Settings saved for this conversation and new ones; they apply to the next reply.</source>
        <translation>设置已保存，用于当前对话和新对话，从下一条回复起生效。</translation>
    </message>
    <message>
        <source>Copied {n} lines of code.</source>
        <translation>已复制 {n} 行代码。</translation>
    </message>
    <message>
        <source>· ready</source>
        <translation>· 就绪</translation>
    </message>
    <message>
        <source>· no model loaded</source>
        <translation>· 未加载模型</translation>
    </message>
    <message>
        <source>generating</source>
        <translation>正在生成</translation>
    </message>
    <message>
        <source>prefill {share} % ({done}/{total} tokens)</source>
        <translation>预填充 {share} %（{done}/{total} 个 token）</translation>
    </message>
    <message>
        <source>Waiting for the model…</source>
        <translation>正在等待模型…</translation>
    </message>
</context>
<context>
    <name>MessageArea</name>
    <message>
        <source>Dismiss this message</source>
        <translation>关闭这条提示</translation>
    </message>
    <message>
        <source>Dismiss</source>
        <translation>关闭</translation>
    </message>
</context>
<context>
    <name>MessageBrowser</name>
    <message>
        <source>[image: {}]</source>
        <translation>[图片：{}]</translation>
    </message>
    <message>
        <source>code</source>
        <translation>代码</translation>
    </message>
    <message>
        <source>Copy</source>
        <translation>复制</translation>
    </message>
</context>
<context>
    <name>MessageWidget</name>
    <message>
        <source>stopped</source>
        <translation>已停止</translation>
    </message>
    <message>
        <source>length limit reached</source>
        <translation>已达长度上限</translation>
    </message>
    <message>
        <source>error</source>
        <translation>出错</translation>
    </message>
    <message>
        <source>{n} token</source>
        <translation>{n} 个 token</translation>
    </message>
    <message>
        <source>{n} tokens</source>
        <translation>{n} 个 token</translation>
    </message>
    <message>
        <source>Edit</source>
        <translation>编辑</translation>
    </message>
    <message>
        <source>Regenerate</source>
        <translation>重新生成</translation>
    </message>
    <message>
        <source>Continue</source>
        <translation>继续生成</translation>
    </message>
    <message>
        <source>Fork from here</source>
        <translation>从此处分支</translation>
    </message>
    <message>
        <source>Edit this message and send it again</source>
        <translation>编辑这条消息并重新发送</translation>
    </message>
    <message>
        <source>Generate this reply again</source>
        <translation>重新生成这条回复</translation>
    </message>
    <message>
        <source>Continue this reply where it stopped</source>
        <translation>从停止处继续这条回复</translation>
    </message>
    <message>
        <source>Attached: {names}</source>
        <translation>附件：{names}</translation>
    </message>
    <message>
        <source>Continue this reply where the length limit cut it</source>
        <translation type="vanished">从长度上限截断处继续这条回复</translation>
    </message>
    <message>
        <source>You</source>
        <translation>你</translation>
    </message>
    <message>
        <source>Miaohui</source>
        <translation>秒回</translation>
    </message>
    <message>
        <source>Your message</source>
        <translation>你的消息</translation>
    </message>
    <message>
        <source>Reply from Miaohui</source>
        <translation>秒回的回复</translation>
    </message>
    <message>
        <source>Start a new chat with the messages up to this one; this chat stays as it is.</source>
        <translation>用截至这条的消息开启新对话，当前对话保持不变。</translation>
    </message>
</context>
<context>
    <name>MetricHelp</name>
    <message>
        <source>Time to first token: from pressing Send to the first token of the reply — the chat template, tokenisation and the prefill of every prompt token not reused from the cache. Good: under 0.3 s for a short message; it grows with the tokens prefilled (see Prefill).</source>
        <translation>首 token 延迟：从点击“发送”到回复的第一个 token——包括套用对话模板、分词，以及对缓存中无法复用的每个提示词 token 做预填充。良好：短消息低于 0.3 s；它随预填充的 token 数增长（见“预填充”）。</translation>
    </message>
    <message>
        <source>Time to first thought: from pressing Send to the first token of a reasoning model&apos;s thought (what it writes between its thinking markers before answering). The same as the time to first token when the reply starts with a thought; shown only for replies that think.</source>
        <translation>首个思考 token 延迟：从点击“发送”到推理模型思考内容的第一个 token（思考内容即它在回答前写在思考标记之间的部分）。回复以思考开头时，它与首 token 延迟相同；仅在回复包含思考时显示。</translation>
    </message>
    <message>
        <source>Time to first answer token: from pressing Send to the first token of the answer, after the thought. What you wait before the answer itself starts: the time to first token plus the whole thought.</source>
        <translation>首个回答 token 延迟：从点击“发送”到思考结束后回答的第一个 token。也就是回答正文开始前你要等的时间：首 token 延迟加上整段思考。</translation>
    </message>
    <message>
        <source>A reasoning model&apos;s reply: from pressing Send to the first token of its thought (the template, tokenisation and prefill included). Shown only when the reply thinks.</source>
        <translation type="vanished">推理模型的回复：从点击“发送”到其思考内容的第一个 token（包括套用模板、分词和预填充）。仅在回复包含思考时显示。</translation>
    </message>
    <message>
        <source>From pressing Send to the first token of the answer, after the thought: the wait a reader feels. The thought&apos;s tokens are decoded first, so it grows with them.</source>
        <translation type="vanished">从点击“发送”到思考之后回答的第一个 token：也就是读者实际感受到的等待。思考的 token 要先解码，所以它随思考的 token 数增长。</translation>
    </message>
    <message>
        <source>Prefill: the prompt tokens computed for this reply (the tokens the KV cache already held are reused for free) and their speed: tokens ÷ the time from the first prefill chunk to the last prompt position&apos;s logits. Many tokens run in one pass, so good is hundreds to thousands of tok/s, far above decode.</source>
        <translation>预填充：本条回复计算的提示词 token 数（KV 缓存中已有的 token 直接复用，没有开销）及其速度：token 数 ÷ 从第一个预填充分块到最后一个提示词位置得出 logits 的时间。大量 token 在一次前向计算中一起处理，所以良好的速度是数百到数千 tok/s，远高于解码。</translation>
    </message>
    <message>
        <source>Decode now: the speed of the last 8 tokens (8 ÷ the sum of their gaps). Below the average it says the reply is slowing down now: a longer KV cache, or another program on the processor.</source>
        <translation>当前解码速度：最近 8 个 token 的速度（8 ÷ 它们的间隔之和）。低于平均值说明回复正在变慢：KV 缓存变长了，或有其他程序在占用处理器。</translation>
    </message>
    <message>
        <source>Decode average: (tokens − 1) ÷ the time from the first token to the last. Each token reads every weight and the whole KV cache once, so memory bandwidth caps it (the Roofline section).</source>
        <translation>平均解码速度：(token 数 − 1) ÷ 从第一个 token 到最后一个 token 的时间。每个 token 都要把全部权重和整个 KV 缓存读一遍，所以它的上限由内存带宽决定（见“屋顶线模型”一节）。</translation>
    </message>
    <message>
        <source>Tokens generated by this reply, the end token included (as vLLM counts them).</source>
        <translation>本条回复生成的 token 数，包括结束 token（与 vLLM 的计数方式相同）。</translation>
    </message>
    <message>
        <source>Time per output token: (end to end − TTFT) ÷ (tokens − 1), the mean gap between tokens. Good: under 50 ms reads faster than people read.</source>
        <translation>每个输出 token 耗时：(端到端耗时 − TTFT) ÷ (token 数 − 1)，即 token 之间的平均间隔。良好：低于 50 ms，出字比人阅读还快。</translation>
    </message>
    <message>
        <source>End to end: from pressing Send to the last token (TTFT + every decode step).</source>
        <translation>端到端耗时：从点击“发送”到最后一个 token（TTFT + 每一步解码）。</translation>
    </message>
    <message>
        <source>The server&apos;s own time to first token, from its /metrics, without the network.</source>
        <translation>服务器自己统计的首 token 延迟，取自它的 /metrics，不含网络耗时。</translation>
    </message>
    <message>
        <source>KV cache (measured): the bytes of the keys and values kept for every token of this conversation, summed over the cache&apos;s tensors (the storage reserved for them in brackets when larger). Every decode step reads all of it, so it slows decoding as the conversation grows.</source>
        <translation>KV 缓存（实测）：为本次对话每个 token 保存的键和值的字节数，按缓存的各个张量求和（为它们预留的存储更大时，在括号中注明）。每一步解码都要把它全部读一遍，所以对话越长，解码越慢。</translation>
    </message>
    <message>
        <source>The share of the server&apos;s KV cache in use, from its /metrics: every request it serves.</source>
        <translation>服务器 KV 缓存的使用比例，取自它的 /metrics：包括它服务的所有请求。</translation>
    </message>
    <message>
        <source>The KV cache by formula: 2 (keys and values) × L layers × kv key/value heads × d head size × T tokens × b bytes per value. It should equal the measured figure above; a difference means the cache holds more than the tokens.</source>
        <translation>按公式计算的 KV 缓存：2（键和值）× L 层 × kv 个键/值头 × d 头维度 × T 个 token × b 每个值的字节数。它应与上面的实测值相等；若不相等，说明缓存中存放的不止这些 token。</translation>
    </message>
    <message>
        <source>What the cache would take without grouped-query attention (one key/value head per query head): 2 × L × d model width × T × b. The ratio to the formula above is what GQA saves.</source>
        <translation>不用分组查询注意力（每个查询头各有一个键/值头）时缓存所需的内存：2 × L × d 模型宽度 × T × b。它与上面公式结果之比，就是 GQA 节省的倍数。</translation>
    </message>
    <message>
        <source>The KV cache as a share of this device&apos;s memory (system RAM, or the GPU&apos;s memory). Under a few percent is comfortable; near the memory left after the weights, long chats will not fit.</source>
        <translation>KV 缓存占此设备内存（系统内存或 GPU 显存）的比例。低于百分之几就很宽裕；若接近加载权重后剩下的内存，长对话就放不下了。</translation>
    </message>
    <message>
        <source>The bytes of the model&apos;s parameters as loaded (after quantization). Each decode step reads them once: fewer bytes per weight (int4, int8) means more tokens per second.</source>
        <translation>模型参数加载后（量化后）的字节数。每一步解码都要把它们读一遍：每个权重的字节越少（int4、int8），每秒生成的 token 就越多。</translation>
    </message>
    <message>
        <source>Peak memory during this reply: the process&apos;s resident memory sampled on a CPU, the allocator&apos;s peak on a GPU. It should stay well below the device&apos;s memory.</source>
        <translation>本条回复期间的峰值内存：在 CPU 上为采样得到的进程常驻内存，在 GPU 上为分配器的峰值。它应远低于设备的内存容量。</translation>
    </message>
    <message>
        <source>Where the model runs (a CPU, a CUDA GPU, or a server).</source>
        <translation>模型运行的位置（CPU、CUDA GPU 或服务器）。</translation>
    </message>
    <message>
        <source>How the weights are stored: bf16/fp32 full, int8/int4 quantized (fewer bytes read per token).</source>
        <translation>权重的存储方式：bf16/fp32 为完整精度，int8/int4 为量化（每个 token 读取的字节更少）。</translation>
    </message>
    <message>
        <source>Context: the positions used (prompt + reply) of the model&apos;s window. When full, the oldest turns are dropped (system prompt kept) and must be prefilled again if they come back.</source>
        <translation>上下文：模型窗口中已使用的位置数（提示词 + 回复）。占满后，最早的几轮对话会被舍弃（系统提示词保留）；它们若再被送入模型，就要重新预填充。</translation>
    </message>
    <message>
        <source>Bytes read per token: every weight once (the input embedding&apos;s one row aside) plus the whole KV cache at the current length, split.</source>
        <translation>每个 token 读取的字节数：全部权重各读一次（输入嵌入除外，它只读一行），加上当前长度下的整个 KV 缓存，分项列出。</translation>
    </message>
    <message>
        <source>Achieved bandwidth: bytes read per token × decode tok/s — how fast this reply streams memory.</source>
        <translation>实际带宽：每个 token 读取的字节数 × 解码 tok/s——即本条回复读取内存的速度。</translation>
    </message>
    <message>
        <source>This device&apos;s memory read bandwidth, measured once (a sum over a buffer much larger than the processor&apos;s caches) and kept in the data folder; Measure again after changing hardware or settings.</source>
        <translation>此设备的内存读取带宽，只测量一次（对一个远大于处理器缓存的缓冲区求和）并保存在数据文件夹中；更换硬件或设置后，请点击“重新测量”。</translation>
    </message>
    <message>
        <source>The ceiling: measured bandwidth ÷ bytes read per token, the fastest decode this memory allows. A good engine reaches 50–80 % of it.</source>
        <translation>速度上限：实测带宽 ÷ 每个 token 读取的字节数，即这块内存所允许的最快解码速度。好的推理引擎能达到它的 50–80 %。</translation>
    </message>
    <message>
        <source>bandwidth-bound: at least half the ceiling, memory is the limit. overhead-bound: far below it, time goes to Python, kernel launches or small products. machine busy: other programs used at least a quarter of the processor during the reply (from psutil), so the speed says little about the engine.</source>
        <translation>受带宽限制：达到上限的一半以上，瓶颈在内存。受开销限制：远低于上限，时间耗在 Python、内核启动或小规模矩阵乘法上。机器繁忙：回复期间其他程序占用了至少四分之一的处理器（数据来自 psutil），因此这个速度说明不了引擎本身的快慢。</translation>
    </message>
    <message>
        <source>On this device the memory allows at most {ceiling} tok/s for this model at this length.</source>
        <translation>在此设备上，受内存所限，该模型在当前长度下最快 {ceiling} tok/s。</translation>
    </message>
</context>
<context>
    <name>ModelBar</name>
    <message>
        <source>default</source>
        <translation>默认</translation>
    </message>
    <message>
        <source>Hugging Face cache</source>
        <translation>Hugging Face 缓存</translation>
    </message>
    <message>
        <source>recent</source>
        <translation>最近使用</translation>
    </message>
    <message>
        <source>Model</source>
        <translation>模型</translation>
    </message>
    <message>
        <source>The models on this computer, each with the size of its weights on disk (MiB, GiB: powers of 1024); a smaller file reads faster per token</source>
        <translation>本机上的模型，各附有其权重在磁盘上的大小（MiB、GiB 按 1024 的幂计）；文件越小，每个 token 读得越快</translation>
    </message>
    <message>
        <source>Precision</source>
        <translation>精度</translation>
    </message>
    <message>
        <source>auto: bf16 where the CPU/GPU computes it natively, else fp32.
int8 / int4: native weight-only kernels (fewer bytes per weight, faster tokens)
bnb-int8 / nf4 / fp4: bitsandbytes (less memory, slower on a CPU)</source>
        <translation type="vanished">auto：CPU/GPU 原生支持 bf16 时用 bf16，否则用 fp32。
int8 / int4：原生的仅权重量化内核（每个权重占的字节更少，出 token 更快）
bnb-int8 / nf4 / fp4：bitsandbytes 量化（更省内存，但在 CPU 上更慢）</translation>
    </message>
    <message>
        <source>auto: on a CPU int4 or int8 when they keep the model&apos;s answers (checked once per model), else bf16
where the CPU/GPU computes it natively, else fp32; a Q4/Q8 GGUF keeps its bits.
int8 / int4: native weight-only kernels (fewer bytes per weight, faster tokens)
bnb-int8 / nf4 / fp4: bitsandbytes (less memory, slower on a CPU)</source>
        <translation>auto：在 CPU 上，若 int4 或 int8 能保持模型的回答（每个模型只检查一次）就用它们，否则在 CPU/GPU 原生支持时用 bf16，不支持则用 fp32；Q4/Q8 的 GGUF 保留原有位数。
int8 / int4：原生的仅权重量化内核（每个权重占的字节更少，出 token 更快）
bnb-int8 / nf4 / fp4：bitsandbytes 量化（更省内存，但在 CPU 上更慢）</translation>
    </message>
    <message>
        <source>KV cache</source>
        <translation>KV 缓存</translation>
    </message>
    <message>
        <source>auto: the KV cache in the model&apos;s own precision (bf16, fp16 or fp32)
int8: 8-bit keys and values with a scale per head and position: about half the KV memory,
next tokens agree with the 16-bit cache on ~99% of positions
(fast runner only; applies at the next Load)</source>
        <translation>auto：KV 缓存采用模型自身的精度（bf16、fp16 或 fp32）
int8：8 位的键和值，每个头、每个位置各带一个缩放因子：KV 内存约减半，
在约 99% 的位置上，预测的下一个 token 与 16 位缓存一致
（仅限快速路径运行器；下次“加载”时生效）</translation>
    </message>
    <message>
        <source>Device</source>
        <translation>设备</translation>
    </message>
    <message>
        <source>auto: the GPU when there is one, else the CPU. Decoding reads every weight per token, so the device&apos;s memory bandwidth sets its speed</source>
        <translation>auto：有 GPU 时用 GPU，否则用 CPU。解码每个 token 都要把全部权重读一遍，所以速度取决于设备的内存带宽</translation>
    </message>
    <message>
        <source>Load</source>
        <translation>加载</translation>
    </message>
    <message>
        <source>Open model…</source>
        <translation>打开模型…</translation>
    </message>
    <message>
        <source>Model folder…</source>
        <translation>模型文件夹…</translation>
    </message>
    <message>
        <source>GGUF file…</source>
        <translation>GGUF 文件…</translation>
    </message>
    <message>
        <source>Connect to server…</source>
        <translation>连接服务器…</translation>
    </message>
    <message>
        <source>Chat with a model served by vLLM, llama-server, Ollama, LM Studio or python -m engine serve (an OpenAI-compatible API)</source>
        <translation>与 vLLM、llama-server、Ollama、LM Studio 或 python -m engine serve 提供的模型对话（OpenAI 兼容 API）</translation>
    </message>
    <message>
        <source>The model to load</source>
        <translation>要加载的模型</translation>
    </message>
    <message>
        <source>Where the model runs</source>
        <translation>模型运行的设备</translation>
    </message>
    <message>
        <source>KV cache precision</source>
        <translation>KV 缓存精度</translation>
    </message>
    <message>
        <source>Load the chosen model at this precision on this device</source>
        <translation>以所选精度在所选设备上加载该模型</translation>
    </message>
    <message>
        <source>Open a model folder or a GGUF file and load it</source>
        <translation>打开模型文件夹或 GGUF 文件并加载</translation>
    </message>
    <message>
        <source>Loading…</source>
        <translation>加载中…</translation>
    </message>
    <message>
        <source>Precision auto chose: {precision}</source>
        <translation>auto 选择的精度：{precision}</translation>
    </message>
    <message>
        <source>Open a model folder</source>
        <translation>打开模型文件夹</translation>
    </message>
    <message>
        <source>Open a GGUF model</source>
        <translation>打开 GGUF 模型</translation>
    </message>
    <message>
        <source>GGUF models (*.gguf)</source>
        <translation>GGUF 模型 (*.gguf)</translation>
    </message>
</context>
<context>
    <name>ModelCard</name>
    <message>
        <source>MQA: all {heads} query heads share one K/V head, so the cache is {heads}× smaller than MHA.</source>
        <translation>MQA（多查询注意力）：全部 {heads} 个查询头共用一个 K/V 头，KV 缓存只有 MHA 的 1/{heads}。</translation>
    </message>
    <message>
        <source>GQA: each group of {group} query heads shares one K/V head, so the cache is {group}× smaller than with {heads} K/V heads.</source>
        <translation>GQA（分组查询注意力）：每 {group} 个查询头为一组，共用一个 K/V 头，KV 缓存只有 {heads} 个 K/V 头时的 1/{group}。</translation>
    </message>
    <message>
        <source>MHA: every one of the {heads} query heads has its own K/V head (no cache saving).</source>
        <translation>MHA（多头注意力）：{heads} 个查询头各有自己的 K/V 头（KV 缓存没有节省）。</translation>
    </message>
    <message>
        <source>fast path</source>
        <translation>快速路径</translation>
    </message>
    <message>
        <source>plain (transformers&apos; forward): {reason}</source>
        <translation>普通（transformers 的 forward）：{reason}</translation>
    </message>
    <message>
        <source>{tokens} tokens → {bytes} (no GQA: {no_gqa})</source>
        <translation>{tokens} 个 token → {bytes}（不用 GQA：{no_gqa}）</translation>
    </message>
    <message>
        <source>Model</source>
        <translation>模型</translation>
    </message>
    <message>
        <source>Precision · device</source>
        <translation>精度 · 设备</translation>
    </message>
    <message>
        <source>int8 KV cache</source>
        <translation>int8 KV 缓存</translation>
    </message>
    <message>
        <source>Runner</source>
        <translation>运行器</translation>
    </message>
    <message>
        <source>Layers (L)</source>
        <translation>层数（L）</translation>
    </message>
    <message>
        <source>Hidden size (d)</source>
        <translation>隐藏维度（d）</translation>
    </message>
    <message>
        <source>Attention heads</source>
        <translation>注意力头数</translation>
    </message>
    <message>
        <source>KV heads</source>
        <translation>KV 头数</translation>
    </message>
    <message>
        <source>Head dim</source>
        <translation>头维度</translation>
    </message>
    <message>
        <source>Vocabulary (V)</source>
        <translation>词表大小（V）</translation>
    </message>
    <message>
        <source>Context length</source>
        <translation>上下文长度</translation>
    </message>
    <message>
        <source>{tokens} tokens</source>
        <translation>{tokens} 个 token</translation>
    </message>
    <message>
        <source>Parameters (exact)</source>
        <translation>参数量（精确值）</translation>
    </message>
    <message>
        <source>Seeds&apos; estimate V·d + 12·L·d²</source>
        <translation>原文估算 V·d + 12·L·d²</translation>
    </message>
    <message>
        <source>Weights in memory</source>
        <translation>权重内存占用</translation>
    </message>
    <message>
        <source>KV bytes / token (GQA form)</source>
        <translation>每 token 的 KV 字节数（GQA 公式）</translation>
    </message>
    <message>
        <source>KV bytes / token (no-GQA form)</source>
        <translation>每 token 的 KV 字节数（无 GQA 公式）</translation>
    </message>
    <message>
        <source>KV memory, current context</source>
        <translation>KV 内存（当前上下文）</translation>
    </message>
    <message>
        <source>KV memory, full context</source>
        <translation>KV 内存（满上下文）</translation>
    </message>
    <message>
        <source>Load a model to see its card.</source>
        <translation>加载模型后即可查看模型卡片。</translation>
    </message>
    <message>
        <source>Model card</source>
        <translation>模型卡片</translation>
    </message>
    <message>
        <source>The loaded model&apos;s architecture and what its KV cache costs</source>
        <translation>已加载模型的架构及其 KV 缓存的内存开销</translation>
    </message>
    <message>
        <source>{name} runs on a server: its architecture is not shared through the API.</source>
        <translation>{name} 运行在服务器上：其架构信息不会通过 API 提供。</translation>
    </message>
</context>
<context>
    <name>ModelPagePanel</name>
    <message>
        <source>No model selected</source>
        <translation>未选择模型</translation>
    </message>
    <message>
        <source>Search, then pick a result to see its files and whether it fits.</source>
        <translation>先搜索，再选择一个结果，查看它的文件以及本机是否放得下。</translation>
    </message>
    <message>
        <source>Files</source>
        <translation>文件</translation>
    </message>
    <message>
        <source>File</source>
        <translation>文件</translation>
    </message>
    <message>
        <source>Size</source>
        <translation>大小</translation>
    </message>
    <message>
        <source>Download takes it?</source>
        <translation>是否下载？</translation>
    </message>
    <message>
        <source>Files of this model</source>
        <translation>该模型的文件</translation>
    </message>
    <message>
        <source>Download</source>
        <translation>下载</translation>
    </message>
    <message>
        <source>What a download takes: the safetensors weights, or one GGUF quantization</source>
        <translation>下载内容：safetensors 权重，或其中一个 GGUF 量化版本</translation>
    </message>
    <message>
        <source>What to download</source>
        <translation>要下载的内容</translation>
    </message>
    <message>
        <source>Download into the models folder, verified file by file</source>
        <translation>下载到模型文件夹，并逐个文件校验</translation>
    </message>
    <message>
        <source>Nothing to download</source>
        <translation>没有可下载的内容</translation>
    </message>
    <message>
        <source>Already installed at {path} (see the Installed tab)</source>
        <translation>已安装在 {path}（见“已安装”标签页）</translation>
    </message>
    <message>
        <source>Downloads are off</source>
        <translation>下载已关闭</translation>
    </message>
    <message>
        <source>Another download is under way</source>
        <translation>另一个下载正在进行</translation>
    </message>
    <message>
        <source>Gated: its owners must grant access first, and Miaohui downloads only open models</source>
        <translation>受限模型：需所有者先授予访问权限，而秒回只下载公开模型</translation>
    </message>
    <message>
        <source>Reading the model&apos;s page…</source>
        <translation>正在读取模型页面…</translation>
    </message>
    <message>
        <source>gated (needs the owners&apos; permission)</source>
        <translation>受限（需所有者许可）</translation>
    </message>
    <message>
        <source>open</source>
        <translation>公开</translation>
    </message>
    <message>
        <source>needs its own Python code: refused</source>
        <translation>需要运行自带的 Python 代码：已拒绝</translation>
    </message>
    <message>
        <source>no custom code</source>
        <translation>无自定义代码</translation>
    </message>
    <message>
        <source>{format} · license {license} · {gated} · {code} · {downloads} downloads · updated {updated}</source>
        <translation>{format} · 许可证 {license} · {gated} · {code} · {downloads} 次下载 · 更新于 {updated}</translation>
    </message>
    <message>
        <source>safetensors weights + config and tokenizer ({n} files, {size})</source>
        <translation>safetensors 权重 + 配置和分词器（{n} 个文件，{size}）</translation>
    </message>
    <message>
        <source>GGUF {quant} · {size} · {file}</source>
        <translation>GGUF {quant} · {size} · {file}</translation>
    </message>
    <message>
        <source>No fit estimate: {why}</source>
        <translation>无法估算是否放得下：{why}</translation>
    </message>
    <message>
        <source>this model has nothing the engine can load</source>
        <translation>此模型没有推理引擎能加载的文件</translation>
    </message>
    <message>
        <source>yes, verified against its checksum</source>
        <translation>是，并按校验和验证</translation>
    </message>
    <message>
        <source>never: pickle weights can run code</source>
        <translation>绝不：pickle 权重可能执行代码</translation>
    </message>
    <message>
        <source>no: the model is refused</source>
        <translation>否：该模型被拒绝</translation>
    </message>
    <message>
        <source>if chosen above</source>
        <translation>若在上方选中</translation>
    </message>
    <message>
        <source>not needed</source>
        <translation>不需要</translation>
    </message>
    <message>
        <source>Reading config.json…</source>
        <translation>正在读取 config.json…</translation>
    </message>
    <message>
        <source>Reading the header of {file}…</source>
        <translation>正在读取 {file} 的文件头…</translation>
    </message>
</context>
<context>
    <name>ModelRestorer</name>
    <message>
        <source>This conversation used {name}, which is not on this machine; continuing with {current}.</source>
        <translation>这个对话用的是 {name}，但本机上没有这个模型；将继续使用 {current}。</translation>
    </message>
</context>
<context>
    <name>ModelsLabel</name>
    <message>
        <source>chat model</source>
        <translation>对话模型</translation>
    </message>
    <message>
        <source>embedding model</source>
        <translation>嵌入模型</translation>
    </message>
    <message>
        <source>vision model</source>
        <translation>视觉模型</translation>
    </message>
    <message>
        <source>Memory budget for models: {size} (past it the least recently used is unloaded)</source>
        <translation>模型内存预算：{size}（超出时卸载最久未用的模型）</translation>
    </message>
    <message>
        <source>In memory: {models}</source>
        <translation>内存中：{models}</translation>
    </message>
    <message>
        <source>{kind}: {name}, {size}</source>
        <translation>{kind}：{name}，{size}</translation>
    </message>
</context>
<context>
    <name>ModelsWindow</name>
    <message>
        <source>Models</source>
        <translation>模型管理</translation>
    </message>
    <message>
        <source>Allow downloads from Hugging Face</source>
        <translation>允许从 Hugging Face 下载</translation>
    </message>
    <message>
        <source>Off by default. When on, this window searches huggingface.co (or the HF_ENDPOINT you set) and downloads the models you choose. No account or token is ever sent.</source>
        <translation type="vanished">默认关闭。开启后，此窗口会搜索 huggingface.co（或你设置的 HF_ENDPOINT）并下载你选择的模型。绝不发送任何账号或访问令牌。</translation>
    </message>
    <message>
        <source>Off by default. When on, this window searches huggingface.co (or the HF_ENDPOINT you set) and downloads the models you choose. A token is sent only when you save one below, and only there.</source>
        <translation>默认关闭。开启后，此窗口会搜索 huggingface.co（或你设置的 HF_ENDPOINT）并下载你选择的模型。只有在下方保存了令牌时才会发送令牌，且只发送到那里。</translation>
    </message>
    <message>
        <source>Installed</source>
        <translation>已安装</translation>
    </message>
    <message>
        <source>Recommended</source>
        <translation>推荐</translation>
    </message>
    <message>
        <source>Search Hugging Face</source>
        <translation>搜索 Hugging Face</translation>
    </message>
    <message>
        <source>Model library</source>
        <translation>模型库</translation>
    </message>
    <message>
        <source>Installed models and Hugging Face search</source>
        <translation>已安装的模型与 Hugging Face 搜索</translation>
    </message>
    <message>
        <source>Model library sections</source>
        <translation>模型库分区</translation>
    </message>
    <message>
        <source>On: searches and downloads go to {where}; a saved token goes there only.</source>
        <translation>已开启：搜索和下载都发往 {where}；已保存的令牌只会发往那里。</translation>
    </message>
    <message>
        <source>On: searches and downloads go to {where}, without any account or token.</source>
        <translation type="vanished">已开启：搜索和下载都发往 {where}，不带任何账号或访问令牌。</translation>
    </message>
    <message>
        <source>Off: nothing in this window touches the network. Installed models work as always.</source>
        <translation>已关闭：此窗口不会访问网络。已安装的模型照常可用。</translation>
    </message>
    <message>
        <source>Downloads from Hugging Face are off: tick “Allow downloads from Hugging Face” first.</source>
        <translation>从 Hugging Face 下载已关闭：请先勾选“允许从 Hugging Face 下载”。</translation>
    </message>
    <message>
        <source>Another download is under way: wait for it, or pause it first.</source>
        <translation>另一个下载正在进行：请等它完成，或先暂停它。</translation>
    </message>
    <message>
        <source>Installed {path}: it is in the Installed tab, ready to use.</source>
        <translation>已安装 {path}：在“已安装”标签页中即可使用。</translation>
    </message>
</context>
<context>
    <name>PerfPanel</name>
    <message>
        <source>⚠ KV cache was evicted: prefilled the whole conversation again</source>
        <translation>⚠ KV 缓存已被逐出：整段对话重新做了预填充</translation>
    </message>
    <message>
        <source>Time to first token</source>
        <translation>首 token 延迟（TTFT）</translation>
    </message>
    <message>
        <source>Time to first thought</source>
        <translation>首个思考 token 延迟</translation>
    </message>
    <message>
        <source>Time to first answer token</source>
        <translation>首个回答 token 延迟</translation>
    </message>
    <message>
        <source>Prefill</source>
        <translation>预填充</translation>
    </message>
    <message>
        <source>Decode now</source>
        <translation>当前解码速度</translation>
    </message>
    <message>
        <source>Decode average</source>
        <translation>平均解码速度</translation>
    </message>
    <message>
        <source>Tokens generated</source>
        <translation>已生成 token 数</translation>
    </message>
    <message>
        <source>Time per output token</source>
        <translation>每个输出 token 耗时</translation>
    </message>
    <message>
        <source>End to end</source>
        <translation>端到端耗时</translation>
    </message>
    <message>
        <source>Server&apos;s TTFT</source>
        <translation>服务器端 TTFT</translation>
    </message>
    <message>
        <source>KV cache (measured)</source>
        <translation>KV 缓存（实测）</translation>
    </message>
    <message>
        <source>Server&apos;s KV cache</source>
        <translation>服务器端 KV 缓存</translation>
    </message>
    <message>
        <source>KV formula 2·L·kv·d·T·b</source>
        <translation>KV 公式 2·L·kv·d·T·b</translation>
    </message>
    <message>
        <source>Without GQA 2·L·d·T·b</source>
        <translation>不用 GQA 2·L·d·T·b</translation>
    </message>
    <message>
        <source>KV share of memory</source>
        <translation>KV 占内存比例</translation>
    </message>
    <message>
        <source>Weights</source>
        <translation>权重</translation>
    </message>
    <message>
        <source>Peak memory</source>
        <translation>峰值内存</translation>
    </message>
    <message>
        <source>Device</source>
        <translation>设备</translation>
    </message>
    <message>
        <source>Precision</source>
        <translation>精度</translation>
    </message>
    <message>
        <source>Speed</source>
        <translation>速度</translation>
    </message>
    <message>
        <source>Per-token latency</source>
        <translation>逐 token 延迟</translation>
    </message>
    <message>
        <source>Memory</source>
        <translation>内存</translation>
    </message>
    <message>
        <source>Context</source>
        <translation>上下文</translation>
    </message>
    <message>
        <source>Roofline</source>
        <translation>屋顶线模型</translation>
    </message>
    <message>
        <source>Model</source>
        <translation>模型</translation>
    </message>
    <message>
        <source>Only the {n} most recent chats keep their KV cache between replies (at most {bytes} together).</source>
        <translation>只有最近的 {n} 个对话会在两次回复之间保留 KV 缓存（合计最多 {bytes}）。</translation>
    </message>
    <message>
        <source>Performance figures</source>
        <translation>性能指标</translation>
    </message>
    <message>
        <source>The figures of the reply being generated, or of the last one</source>
        <translation>正在生成的回复（或上一条回复）的各项指标</translation>
    </message>
    <message>
        <source>Per-token latency chart</source>
        <translation>逐 token 延迟图</translation>
    </message>
    <message>
        <source>token</source>
        <translation>token 序号</translation>
    </message>
    <message>
        <source>{n} gaps between tokens; the latest {last} ms, the slowest {max} ms</source>
        <translation>{n} 个 token 间隔；最近一个 {last} ms，最慢一个 {max} ms</translation>
    </message>
    <message>
        <source>No tokens yet</source>
        <translation>尚无 token</translation>
    </message>
    <message>
        <source>0 / {max} tokens</source>
        <translation>0 / {max} token</translation>
    </message>
    <message>
        <source> · images: {n} tokens</source>
        <translation> · 图片：{n} 个 token</translation>
    </message>
    <message>
        <source> · {n} reused</source>
        <translation> · 复用 {n}</translation>
    </message>
    <message>
        <source> (allocated {bytes})</source>
        <translation>（已分配 {bytes}）</translation>
    </message>
    <message>
        <source>{share} % of {total}</source>
        <translation>占 {total} 的 {share} %</translation>
    </message>
    <message>
        <source>{used} / {max} tokens ({share} %)</source>
        <translation>{used} / {max} token（{share} %）</translation>
    </message>
    <message>
        <source>⚠ {n} oldest message dropped to fit the context window (system prompt kept)</source>
        <translation>⚠ 为放进上下文窗口，最早的 {n} 条消息被舍弃（系统提示词保留）</translation>
    </message>
    <message>
        <source>⚠ {n} oldest messages dropped to fit the context window (system prompt kept)</source>
        <translation>⚠ 为放进上下文窗口，最早的 {n} 条消息被舍弃（系统提示词保留）</translation>
    </message>
    <message>
        <source>not reported by this server</source>
        <translation>此服务器未提供</translation>
    </message>
    <message>
        <source>{share} % in use ({source})</source>
        <translation>已使用 {share} %（{source}）</translation>
    </message>
    <message>
        <source>{metric} on the server&apos;s /metrics: the share of its KV cache in use, by every request it serves</source>
        <translation>服务器 /metrics 中的 {metric}：其 KV 缓存被所有在服务的请求占用的比例</translation>
    </message>
    <message>
        <source>{share} % in use ({metric})</source>
        <translation type="vanished">已使用 {share} %（{metric}）</translation>
    </message>
    <message>
        <source>{ttft} (mean of {n} request(s))</source>
        <translation>{ttft}（{n} 个请求的平均值）</translation>
    </message>
    <message>
        <source>The server&apos;s own time to first token, from its /metrics: the requests it finished since the previous reading (the first reading: since it started). The TTFT above is measured here, network included.</source>
        <translation>服务器自己统计的首 token 延迟，取自它的 /metrics：上次读取以来完成的请求（第一次读取时为启动以来）。上面的 TTFT 是在本机测得的，包含网络耗时。</translation>
    </message>
</context>
<context>
    <name>PrecisionReason</name>
    <message>
        <source>{precision} agreed on {agreement}</source>
        <translation>{precision} 的一致率为 {agreement}</translation>
    </message>
    <message>
        <source>auto kept {reference}: the quantized candidates fell short of the quality bar ({missed}).</source>
        <translation>auto 保留了 {reference}：量化候选都没有达到质量门槛（{missed}）。</translation>
    </message>
    <message>
        <source>auto chose {precision}: its next-token choices agree with {reference} on {agreement} of a fixed text (bar {bar}), and it reads {ratio:.2f}× the bytes per token, so it decodes faster.</source>
        <translation>auto 选择了 {precision}：在一段固定文本上，它预测的下一个 token 与 {reference} 的一致率为 {agreement}（门槛 {bar}）；每个 token 只需读取 {ratio:.2f}× 的字节，所以解码更快。</translation>
    </message>
    <message>
        <source>Faster candidates fell short: {missed}.</source>
        <translation>更快的候选未达门槛：{missed}。</translation>
    </message>
    <message>
        <source>Measured at this load; later loads reuse the verdict.</source>
        <translation>本次加载时测得；之后的加载直接沿用这一结论。</translation>
    </message>
    <message>
        <source>Measured at an earlier load of this model.</source>
        <translation>在此前加载该模型时测得。</translation>
    </message>
</context>
<context>
    <name>PromptBox</name>
    <message>
        <source>Message Miaohui…  (Enter to send, Shift+Enter for a new line)</source>
        <translation>给秒回发消息…（Enter 发送，Shift+Enter 换行）</translation>
    </message>
    <message>
        <source>Message</source>
        <translation>消息</translation>
    </message>
    <message>
        <source>Enter sends, Shift+Enter starts a new line</source>
        <translation>按 Enter 发送，按 Shift+Enter 换行</translation>
    </message>
</context>
<context>
    <name>PromptMeter</name>
    <message>
        <source>message: %1 tokens</source>
        <translation>消息：%1 个 token</translation>
    </message>
    <message>
        <source>images: %1 tokens</source>
        <translation>图片：%1 个 token</translation>
    </message>
    <message>
        <source> (KV %1)</source>
        <translation>（KV %1）</translation>
    </message>
    <message>
        <source>images: counting…</source>
        <translation>图片：计数中…</translation>
    </message>
    <message>
        <source>context after sending: %1 of %2 tokens (%3%)</source>
        <translation>发送后上下文：%1 / %2 个 token（%3%）</translation>
    </message>
    <message>
        <source>context after sending: %1 tokens</source>
        <translation>发送后上下文：%1 个 token</translation>
    </message>
    <message>
        <source>TTFT forecast: ~%1 (%2–%3)</source>
        <translation>首字延迟预测：约 %1（%2–%3）</translation>
    </message>
    <message>
        <source>Prefill computes the %1 prompt tokens the KV cache does not hold (%2 are reused); at %3 tok/s, the median prefill rate of the last %4 replies of this model, precision and device (%5–%6 tok/s), that takes about %7.</source>
        <translation>预填充需计算 KV 缓存中没有的 %1 个提示词元（%2 个被复用）；按 %3 tok/s（此模型、精度和设备最近 %4 次回复的预填充速率中位数，范围 %5–%6 tok/s）计算，约需 %7。</translation>
    </message>
    <message>
        <source>Prefill computes the %1 prompt tokens the KV cache does not hold (%2 are reused); how long that takes is forecast once a reply of this model has prefilled at least %3 tokens (a shorter prefill measures the cost of a call, not the rate).</source>
        <translation>预填充需计算 KV 缓存中没有的 %1 个提示词元（%2 个被复用）；待此模型有一次回复预填充了至少 %3 个词元后才预测耗时（更短的预填充测到的是调用开销，而非速率）。</translation>
    </message>
    <message>
        <source>Each picture becomes the tokens the model&apos;s processor makes of it (%1); all are computed by the prefill and kept in the KV cache.</source>
        <translation>每张图片变成模型处理器为它生成的 token（%1）；它们全部由预填充计算，并保存在 KV 缓存中。</translation>
    </message>
    <message>
        <source>TTFT forecast: %1</source>
        <translation type="vanished">预计首 token 延迟：%1</translation>
    </message>
    <message>
        <source>Prefill computes the %1 prompt tokens the KV cache does not hold (%2 are reused); at %3 tok/s, the prefill rate this machine measured on the last reply, that takes about %4.</source>
        <translation type="vanished">预填充要计算 KV 缓存中还没有的 %1 个提示词 token（另有 %2 个直接复用）；按本机上一条回复实测的预填充速度 %3 tok/s，大约需要 %4。</translation>
    </message>
    <message>
        <source>TTFT forecast after the first reply</source>
        <translation>首条回复后即可预测首 token 延迟</translation>
    </message>
    <message>
        <source>Prefill computes the %1 prompt tokens the KV cache does not hold (%2 are reused); how long that takes is forecast once a reply has measured this machine&apos;s prefill rate.</source>
        <translation type="vanished">预填充要计算 KV 缓存中还没有的 %1 个提示词 token（另有 %2 个直接复用）；等一条回复测出本机的预填充速度后，才能预测需要多久。</translation>
    </message>
    <message>
        <source>Sending this leaves out the oldest message to fit the %2-token context.</source>
        <translation>发送后，为放进 %2 token 的上下文，最早的一条消息将被舍弃。</translation>
    </message>
    <message>
        <source>Sending this leaves out the %1 oldest messages to fit the %2-token context.</source>
        <translation>发送后，为放进 %2 token 的上下文，最早的 %1 条消息将被舍弃。</translation>
    </message>
    <message>
        <source>The context leaves room for only %1 tokens of reply (max new tokens: %2).</source>
        <translation>上下文只剩够生成 %1 个 token 的回复（最大生成 token 数：%2）。</translation>
    </message>
</context>
<context>
    <name>RecommendedTab</name>
    <message>
        <source>The default 135M model is there to watch the engine work, not for answers. These models answer for real and run on Miaohui&apos;s fast path; they are ranked for this machine: what fits its free memory first, then how fast it can decode.</source>
        <translation>默认的 135M 模型是用来观察推理引擎如何工作的，不是用来回答问题的。下面这些模型能真正回答问题，并且走秒回的快速路径；它们按本机情况排序：先看能否放进可用内存，再看解码能有多快。</translation>
    </message>
    <message>
        <source>Model</source>
        <translation>模型</translation>
    </message>
    <message>
        <source>Good for</source>
        <translation>适合</translation>
    </message>
    <message>
        <source>Weights</source>
        <translation>权重</translation>
    </message>
    <message>
        <source>Fits?</source>
        <translation>放得下吗？</translation>
    </message>
    <message>
        <source>Speed ceiling</source>
        <translation>速度上限</translation>
    </message>
    <message>
        <source>Access</source>
        <translation>获取条件</translation>
    </message>
    <message>
        <source>Recommended models</source>
        <translation>推荐的模型</translation>
    </message>
    <message>
        <source>The weights in the precision Miaohui would load here: int4 on a CPU (half a byte per weight plus a scale and zero per 32), bf16 on a GPU. MiB = 1,048,576 bytes.</source>
        <translation>按秒回在本机会采用的精度计算的权重大小：CPU 上为 int4（每个权重半个字节，另外每 32 个权重带一个缩放因子和一个零点），GPU 上为 bf16。MiB = 1,048,576 字节。</translation>
    </message>
    <message>
        <source>Weights + the KV cache at 4,096 tokens + 10% working memory + 256 MiB, against the free memory now: fits within 80% of it, tight within all of it.</source>
        <translation>权重 + 4,096 个 token 的 KV 缓存 + 10% 运行内存 + 256 MiB，与当前可用内存比较：不超过其 80% 为放得下，不超过全部为偏紧。</translation>
    </message>
    <message>
        <source>The most tokens per second this machine&apos;s memory allows: measured bandwidth ÷ bytes read per token (every weight once, plus the KV cache). Real decoding reaches about half to four fifths of it.</source>
        <translation>本机内存所允许的最高每秒 token 数：实测带宽 ÷ 每个 token 读取的字节数（全部权重读一遍，再加上 KV 缓存）。实际解码大约能达到它的一半到五分之四。</translation>
    </message>
    <message>
        <source>Measure bandwidth</source>
        <translation>测量带宽</translation>
    </message>
    <message>
        <source>Reads a 256 MiB buffer a few times to measure how fast this machine&apos;s memory streams (about a second; kept for next time).</source>
        <translation>将一个 256 MiB 的缓冲区读取几遍，测出本机内存的读取速度（约需一秒；结果会保存，下次直接使用）。</translation>
    </message>
    <message>
        <source>Open its page</source>
        <translation>打开模型页面</translation>
    </message>
    <message>
        <source>Download</source>
        <translation>下载</translation>
    </message>
    <message>
        <source>≤ {rate:.0f} tok/s</source>
        <translation>≤ {rate:.0f} tok/s</translation>
    </message>
    <message>
        <source>not measured</source>
        <translation>未测量</translation>
    </message>
    <message>
        <source>license to accept on the Hub</source>
        <translation type="vanished">需在 Hugging Face 上接受许可证</translation>
    </message>
    <message>
        <source>open</source>
        <translation>公开</translation>
    </message>
    <message>
        <source>gated: accept its licence, save a token</source>
        <translation>需授权：接受许可协议并保存令牌</translation>
    </message>
    <message>
        <source>Speeds use this machine&apos;s measured memory bandwidth, {rate}.</source>
        <translation>速度按本机实测的内存带宽 {rate} 计算。</translation>
    </message>
    <message>
        <source>The memory bandwidth has not been measured on this machine yet: press “Measure bandwidth” to see how fast each model can decode.</source>
        <translation>本机还没有测量过内存带宽：点击“测量带宽”，看看每个模型的解码能有多快。</translation>
    </message>
    <message>
        <source>fits</source>
        <translation>放得下</translation>
    </message>
    <message>
        <source>tight</source>
        <translation>偏紧</translation>
    </message>
    <message>
        <source>will not fit</source>
        <translation>放不下</translation>
    </message>
    <message>
        <source>Download its weights and tokenizer; the progress shows below.</source>
        <translation>下载它的权重和分词器；进度显示在下方。</translation>
    </message>
    <message>
        <source>Allow downloads from Hugging Face above to download it.</source>
        <translation>请先在上方允许从 Hugging Face 下载，再下载它。</translation>
    </message>
    <message>
        <source>{name} is gated: accept its licence on &lt;a href=&quot;{url}&quot;&gt;its Hugging Face page&lt;/a&gt; with your account, then save a token of that account above.</source>
        <translation>{name} 需要授权：请用你的账号在&lt;a href=&quot;{url}&quot;&gt;它的 Hugging Face 页面&lt;/a&gt;上接受许可协议，然后在上方保存该账号的令牌。</translation>
    </message>
    <message>
        <source>Its files, license and download on Hugging Face.</source>
        <translation>在 Hugging Face 上查看它的文件、许可证和下载。</translation>
    </message>
    <message>
        <source>Allow downloads from Hugging Face above to open its page.</source>
        <translation>请先勾选上方的“允许从 Hugging Face 下载”，才能打开它的页面。</translation>
    </message>
</context>
<context>
    <name>RemoteDialog</name>
    <message>
        <source>Connect to an OpenAI-compatible server</source>
        <translation>连接 OpenAI 兼容服务器</translation>
    </message>
    <message>
        <source>vLLM and python -m engine serve: http://host:8000/v1 · llama-server: http://host:8080/v1 · Ollama: http://host:11434/v1 · LM Studio: http://host:1234/v1</source>
        <translation>vLLM 和 python -m engine serve：http://host:8000/v1 · llama-server：http://host:8080/v1 · Ollama：http://host:11434/v1 · LM Studio：http://host:1234/v1</translation>
    </message>
    <message>
        <source>none</source>
        <translation>无</translation>
    </message>
    <message>
        <source>List models</source>
        <translation>列出模型</translation>
    </message>
    <message>
        <source>Enter the server&apos;s address, then list its models.</source>
        <translation>输入服务器地址，然后列出它提供的模型。</translation>
    </message>
    <message>
        <source>The API key is kept in memory until Miaohui closes. It is never saved: not in the settings, the history, exports or logs (no system keyring is used).</source>
        <translation type="vanished">API 密钥只保存在内存中，秒回关闭即清除。它不会被写入任何地方：设置、历史记录、导出文件和日志里都没有（也不使用系统密钥环）。</translation>
    </message>
    <message>
        <source>Remember the key in the system keyring ({name})</source>
        <translation>在系统钥匙串中记住密钥（{name}）</translation>
    </message>
    <message>
        <source>{name} is not a recommended keyring: it may keep the key in a file, unencrypted.</source>
        <translation>{name} 不是推荐的钥匙串：它可能把密钥以未加密的形式存放在文件中。</translation>
    </message>
    <message>
        <source>Remember the key (stored unencrypted in the settings file)</source>
        <translation>记住密钥（以未加密形式保存在设置文件中）</translation>
    </message>
    <message>
        <source>No system keyring was found. A remembered key is written as plain text to Miaohui&apos;s settings file, where anyone who can read your files can read it.</source>
        <translation>未找到系统钥匙串。记住的密钥会以明文写入秒回的设置文件，任何能读取你文件的人都能看到它。</translation>
    </message>
    <message>
        <source>Unticked, the key is kept in memory until Miaohui closes. It is never written to the history, exports or logs.</source>
        <translation>不勾选时，密钥只保存在内存中，直到秒回关闭。它绝不会写入历史记录、导出文件或日志。</translation>
    </message>
    <message>
        <source>Base URL</source>
        <translation>基础 URL</translation>
    </message>
    <message>
        <source>API key (optional)</source>
        <translation>API 密钥（可选）</translation>
    </message>
    <message>
        <source>Model</source>
        <translation>模型</translation>
    </message>
    <message>
        <source>Connect</source>
        <translation>连接</translation>
    </message>
    <message>
        <source>Asking {url} for its models…</source>
        <translation>正在向 {url} 查询模型列表…</translation>
    </message>
    <message>
        <source> · {n} tokens of context</source>
        <translation> · 上下文 {n} 个 token</translation>
    </message>
    <message>
        <source>{n} model(s) served. Choose one and connect.</source>
        <translation>该服务器提供 {n} 个模型。选择一个并连接。</translation>
    </message>
    <message>
        <source>Could not list the models: {error}</source>
        <translation>无法列出模型：{error}</translation>
    </message>
</context>
<context>
    <name>RemoteSource</name>
    <message>
        <source>connecting</source>
        <translation>正在连接</translation>
    </message>
</context>
<context>
    <name>RooflineView</name>
    <message>
        <source>Bytes read per token</source>
        <translation>每个 token 读取的字节数</translation>
    </message>
    <message>
        <source>Achieved bandwidth</source>
        <translation>实际带宽</translation>
    </message>
    <message>
        <source>Memory bandwidth</source>
        <translation>内存带宽</translation>
    </message>
    <message>
        <source>Ceiling</source>
        <translation>速度上限</translation>
    </message>
    <message>
        <source>Verdict</source>
        <translation>结论</translation>
    </message>
    <message>
        <source>bandwidth-bound</source>
        <translation>受带宽限制</translation>
    </message>
    <message>
        <source>overhead-bound</source>
        <translation>受开销限制</translation>
    </message>
    <message>
        <source>machine busy</source>
        <translation>机器繁忙</translation>
    </message>
    <message>
        <source>Measure again</source>
        <translation>重新测量</translation>
    </message>
    <message>
        <source>Measure this device&apos;s memory bandwidth again (a few seconds; it waits for the reply being generated)</source>
        <translation>重新测量此设备的内存带宽（需几秒；会等正在生成的回复结束后再测）</translation>
    </message>
    <message>
        <source>not measured: {why}</source>
        <translation>未测量：{why}</translation>
    </message>
    <message>
        <source>measuring…</source>
        <translation>正在测量…</translation>
    </message>
    <message>
        <source>{total} = weights {weights} + KV {kv}</source>
        <translation>{total} = 权重 {weights} + KV {kv}</translation>
    </message>
    <message>
        <source> ({share} % of measured)</source>
        <translation>（实测带宽的 {share} %）</translation>
    </message>
    <message>
        <source> (other programs used {share} % of the processor)</source>
        <translation>（其他程序占用了 {share} % 的处理器）</translation>
    </message>
    <message>
        <source>, measured {when}</source>
        <translation>，测于 {when}</translation>
    </message>
    <message>
        <source> while other programs used {share} % of the processor</source>
        <translation>，测量时其他程序占用了 {share} % 的处理器</translation>
    </message>
</context>
<context>
    <name>SearchTab</name>
    <message>
        <source>Downloads are off, so search is off too: nothing in this window touches the network. Tick “Allow downloads from Hugging Face” above to search.</source>
        <translation>下载已关闭，搜索也随之关闭：此窗口不会访问网络。勾选上方的“允许从 Hugging Face 下载”即可搜索。</translation>
    </message>
    <message>
        <source>Search Hugging Face text-generation models, e.g. SmolLM2</source>
        <translation>搜索 Hugging Face 上的文本生成模型，例如 SmolLM2</translation>
    </message>
    <message>
        <source>Search models</source>
        <translation>搜索模型</translation>
    </message>
    <message>
        <source>Most downloaded</source>
        <translation>下载最多</translation>
    </message>
    <message>
        <source>Recently updated</source>
        <translation>最近更新</translation>
    </message>
    <message>
        <source>Sort by</source>
        <translation>排序方式</translation>
    </message>
    <message>
        <source>safetensors or GGUF</source>
        <translation>safetensors 或 GGUF</translation>
    </message>
    <message>
        <source>safetensors only</source>
        <translation>仅 safetensors</translation>
    </message>
    <message>
        <source>GGUF only</source>
        <translation>仅 GGUF</translation>
    </message>
    <message>
        <source>Weights format</source>
        <translation>权重格式</translation>
    </message>
    <message>
        <source>Search</source>
        <translation>搜索</translation>
    </message>
    <message>
        <source>Model</source>
        <translation>模型</translation>
    </message>
    <message>
        <source>Format</source>
        <translation>格式</translation>
    </message>
    <message>
        <source>Downloads</source>
        <translation>下载量</translation>
    </message>
    <message>
        <source>Updated</source>
        <translation>更新时间</translation>
    </message>
    <message>
        <source>Search results</source>
        <translation>搜索结果</translation>
    </message>
    <message>
        <source>◀ Previous</source>
        <translation>◀ 上一页</translation>
    </message>
    <message>
        <source>Next ▶</source>
        <translation>下一页 ▶</translation>
    </message>
    <message>
        <source>Model page</source>
        <translation>模型页面</translation>
    </message>
    <message>
        <source>Downloads from Hugging Face are off: tick “Allow downloads from Hugging Face” to search.</source>
        <translation>从 Hugging Face 下载已关闭：勾选“允许从 Hugging Face 下载”即可搜索。</translation>
    </message>
    <message>
        <source>Searching…</source>
        <translation>正在搜索…</translation>
    </message>
    <message>
        <source>  (gated)</source>
        <translation>（受限）</translation>
    </message>
    <message>
        <source>{repo}
license {license} · {likes} likes</source>
        <translation>{repo}
许可证 {license} · {likes} 个赞</translation>
    </message>
    <message>
        <source>Page {page}</source>
        <translation>第 {page} 页</translation>
    </message>
    <message>
        <source>No text-generation models with safetensors or GGUF weights on this page</source>
        <translation>本页没有带 safetensors 或 GGUF 权重的文本生成模型</translation>
    </message>
    <message>
        <source>no network or the name does not resolve</source>
        <translation>没有网络，或域名无法解析</translation>
    </message>
    <message>
        <source>nothing accepts connections there</source>
        <translation>那里没有程序接受连接</translation>
    </message>
    <message>
        <source>no answer (no network, or a firewall drops the connection)</source>
        <translation>没有应答（没有网络，或防火墙丢弃了连接）</translation>
    </message>
    <message>
        <source>no network, or the host cannot be reached</source>
        <translation>没有网络，或无法到达该主机</translation>
    </message>
    <message>
        <source>Cannot reach Hugging Face: {why}.</source>
        <translation>无法连接 Hugging Face：{why}。</translation>
    </message>
    <message>
        <source>Cannot reach {endpoint}: {why}.</source>
        <translation>无法连接 {endpoint}：{why}。</translation>
    </message>
</context>
<context>
    <name>SettingsDialog</name>
    <message>
        <source>Settings</source>
        <translation>设置</translation>
    </message>
    <message>
        <source>Instructions the model sees before every conversation</source>
        <translation>模型在每段对话开始前看到的指令</translation>
    </message>
    <message>
        <source>System prompt</source>
        <translation>系统提示词</translation>
    </message>
    <message>
        <source>0 = greedy: always the most likely token (deterministic)</source>
        <translation type="vanished">0 即贪心解码：总是选概率最高的 token（结果确定）</translation>
    </message>
    <message>
        <source>How far the choice of each token strays from the most likely one: the model&apos;s scores are divided by it before sampling. 0 = greedy: always the most likely token (deterministic); 0.2-0.7 for facts and code, 0.8-1.0 for varied writing; above 1.2 replies fall apart</source>
        <translation>每个 token 的选择偏离最可能选项的程度：采样前，模型的打分会除以这个值。0 即贪心解码：总是选概率最高的 token（结果确定）；0.2-0.7 适合事实问答和代码，0.8-1.0 适合多样化的写作；超过 1.2 回复就会语无伦次</translation>
    </message>
    <message>
        <source>Temperature</source>
        <translation>温度</translation>
    </message>
    <message>
        <source>Nucleus sampling: only the most likely tokens whose probabilities add up to p are candidates. 1 keeps all; 0.9 cuts the unlikely tail that makes nonsense; lower is more predictable</source>
        <translation>核采样：按概率从高到低、累计概率达到 p 的那些 token 才是候选。1 表示全部保留；0.9 会截掉容易产生胡言乱语的低概率长尾；越低越可预测</translation>
    </message>
    <message>
        <source>Top-p</source>
        <translation>Top-p</translation>
    </message>
    <message>
        <source>off</source>
        <translation>关闭</translation>
    </message>
    <message>
        <source>Only the k most likely tokens are candidates at each step (applied with top-p: the stricter wins). off keeps all; 40-50 is usual</source>
        <translation>每一步只有概率最高的 k 个 token 是候选（与 top-p 同时生效，以更严格者为准）。关闭表示全部保留；通常取 40-50</translation>
    </message>
    <message>
        <source>Top-k</source>
        <translation>Top-k</translation>
    </message>
    <message>
        <source>Makes tokens already in the conversation less likely: their scores are divided by this (multiplied when negative). 1 is off; 1.05-1.2 stops small models looping; higher distorts names and code</source>
        <translation>降低对话中已出现的 token 的概率：它们的打分会除以这个值（打分为负时则乘以它）。1 表示关闭；1.05-1.2 可以防止小模型陷入重复循环；再高会扭曲人名和代码</translation>
    </message>
    <message>
        <source>Repetition penalty</source>
        <translation>重复惩罚</translation>
    </message>
    <message>
        <source>The longest reply, in tokens (about ¾ of an English word, or one or two Chinese characters, each); the reply stops there</source>
        <translation>回复的最大长度，以 token 计（每个 token 约为 ¾ 个英文单词，或一到两个汉字）；回复到此为止</translation>
    </message>
    <message>
        <source>Max new tokens</source>
        <translation>最大生成 token 数</translation>
    </message>
    <message>
        <source>random</source>
        <translation>随机</translation>
    </message>
    <message>
        <source>A fixed seed makes sampled replies reproducible</source>
        <translation>固定随机种子，采样得到的回复就可以复现</translation>
    </message>
    <message>
        <source>Seed</source>
        <translation>随机种子</translation>
    </message>
    <message>
        <source>Keep keys and values of past tokens (KV cache)</source>
        <translation>保留已处理 token 的键和值（KV 缓存）</translation>
    </message>
    <message>
        <source>Off recomputes the whole text for every new token: watch decode tok/s fall</source>
        <translation>关闭后每生成一个新 token 都要重算全部文本：可以看到解码 tok/s 明显下降</translation>
    </message>
    <message>
        <source>KV cache</source>
        <translation>KV 缓存</translation>
    </message>
    <message>
        <source>Saved KV caches</source>
        <translation>已保存的 KV 缓存</translation>
    </message>
    <message>
        <source>System language</source>
        <translation>跟随系统</translation>
    </message>
    <message>
        <source>Applies the next time Miaohui starts</source>
        <translation>下次启动秒回时生效</translation>
    </message>
    <message>
        <source>Language</source>
        <translation>界面语言</translation>
    </message>
    <message>
        <source>Follow the system</source>
        <translation>跟随系统</translation>
    </message>
    <message>
        <source>Light</source>
        <translation>浅色</translation>
    </message>
    <message>
        <source>Dark</source>
        <translation>深色</translation>
    </message>
    <message>
        <source>Light or dark colours; “Follow the system” switches with the system&apos;s dark mode while Miaohui runs</source>
        <translation>浅色或深色配色；选“跟随系统”时，秒回运行中会随系统的深色模式即时切换</translation>
    </message>
    <message>
        <source>Appearance</source>
        <translation>外观</translation>
    </message>
    <message>
        <source>Reply settings apply to the next reply; a new language, after a restart. Saved for future sessions.</source>
        <translation>回复设置从下一条回复起生效；更换界面语言需重启秒回。设置会保存，下次启动依然有效。</translation>
    </message>
    <message>
        <source>Defaults</source>
        <translation>恢复默认</translation>
    </message>
</context>
<context>
    <name>SidePanel</name>
    <message>
        <source>Performance</source>
        <translation>性能</translation>
    </message>
    <message>
        <source>Tokens</source>
        <translation>Token</translation>
    </message>
    <message>
        <source>Model card</source>
        <translation>模型卡片</translation>
    </message>
    <message>
        <source>Tokenizer</source>
        <translation>分词器</translation>
    </message>
    <message>
        <source>Lab</source>
        <translation>实验室</translation>
    </message>
    <message>
        <source>Figures and views</source>
        <translation>指标与视图</translation>
    </message>
    <message>
        <source>Performance, tokens, model card, tokenizer and lab</source>
        <translation>性能、token、模型卡片、分词器与实验室</translation>
    </message>
    <message>
        <source>Side panel tabs</source>
        <translation>侧边栏标签页</translation>
    </message>
</context>
<context>
    <name>SourcesSection</name>
    <message>
        <source>whole text</source>
        <translation>全文</translation>
    </message>
    <message>
        <source>retrieved passages</source>
        <translation>检索段落</translation>
    </message>
    <message>
        <source>Sources ({mode}): no passage matched · {ms:.0f} ms</source>
        <translation>资料（{mode}）：没有匹配的段落 · {ms:.0f} 毫秒</translation>
    </message>
    <message>
        <source>Sources ({mode}): {n} passages · {tokens} tokens added · retrieval {ms:.0f} ms</source>
        <translation>资料（{mode}）：{n} 段 · 加入 {tokens} 个 token · 检索用时 {ms:.0f} 毫秒</translation>
    </message>
    <message>
        <source>Sources ({mode}): {n} added · {tokens} tokens · prepared in {ms:.0f} ms</source>
        <translation>资料（{mode}）：加入 {n} 段 · {tokens} 个 token · 准备用时 {ms:.0f} 毫秒</translation>
    </message>
</context>
<context>
    <name>Speculation</name>
    <message>
        <source>Speculative decoding</source>
        <translation>投机解码</translation>
    </message>
    <message>
        <source>Preparing speculative decoding…</source>
        <translation>正在准备投机解码…</translation>
    </message>
    <message>
        <source>Speculative decoding not used: {reason}</source>
        <translation>未使用投机解码：{reason}</translation>
    </message>
</context>
<context>
    <name>SpeculationChoice</name>
    <message>
        <source>Speculation</source>
        <translation>投机解码</translation>
    </message>
    <message>
        <source>Speculative decoding: something cheap drafts the next tokens and the model checks them all in one forward pass; the reply is the same, only faster when drafts are accepted. Prompt lookup drafts from the conversation&apos;s own words (edits, quotes); self drafts with the model&apos;s int4 copy (CPU); a draft model must share the loaded model&apos;s vocabulary.</source>
        <translation>投机解码：先由一个开销很小的来源起草接下来的几个 token，再由模型在一次前向计算中一并验证；回复内容不变，只是草稿被接受时会更快。提示词查找从对话自身的文字（修改、引用）中起草；自推测用模型的 int4 副本起草（CPU）；草稿模型必须与已加载的模型使用同一词表。</translation>
    </message>
    <message>
        <source>Speculative decoding</source>
        <translation>投机解码</translation>
    </message>
    <message>
        <source>Tint drafts</source>
        <translation>草稿着色</translation>
    </message>
    <message>
        <source>Tint the reply&apos;s tokens that were accepted drafts (written without a forward pass of their own) while it streams</source>
        <translation>在回复流式输出时，为来自被接受草稿的 token（不经单独一次前向计算就写出）着色</translation>
    </message>
    <message>
        <source>Off</source>
        <translation>关闭</translation>
    </message>
    <message>
        <source>Prompt lookup</source>
        <translation>提示词查找</translation>
    </message>
    <message>
        <source>Self (int4 copy)</source>
        <translation>自推测（int4 副本）</translation>
    </message>
    <message>
        <source>Draft: {name}</source>
        <translation>草稿模型：{name}</translation>
    </message>
</context>
<context>
    <name>SpeculationView</name>
    <message>
        <source>Drafter</source>
        <translation>草稿来源</translation>
    </message>
    <message>
        <source>Acceptance rate</source>
        <translation>接受率</translation>
    </message>
    <message>
        <source>Tokens per target step</source>
        <translation>目标模型每步 token 数</translation>
    </message>
    <message>
        <source>Speed-up</source>
        <translation>加速比</translation>
    </message>
    <message>
        <source>Who proposed the tokens the model checked: prompt lookup (the conversation&apos;s own words, no model), the model&apos;s int4 copy (self), or a smaller draft model with the same vocabulary.</source>
        <translation>由谁提出交给模型验证的 token：提示词查找（取自对话自身的文字，不用模型）、模型的 int4 副本（自推测），或词表相同的较小草稿模型。</translation>
    </message>
    <message>
        <source>Drafted tokens the model agreed with ÷ drafted tokens. Greedy keeps a draft only where it equals the model&apos;s own choice, so the reply is the one plain decoding writes.</source>
        <translation>模型认可的草稿 token 数 ÷ 草稿 token 总数。贪心解码只在草稿与模型自己的选择相同时才保留它，所以回复与普通解码写出的完全一样。</translation>
    </message>
    <message>
        <source>Tokens written per forward pass of the model while decoding (1.0 without speculation): accepted drafts come without one. The speed-up&apos;s ceiling, since checking drafts costs a little more than one plain step.</source>
        <translation>解码时模型每次前向计算写出的 token 数（不用投机解码时为 1.0）：被接受的草稿无需单独的前向计算。它是加速比的上限，因为验证草稿比普通的一步解码稍贵一些。</translation>
    </message>
    <message>
        <source>This reply&apos;s decode rate ÷ the median decode rate of recent replies without speculation on the same model, precision and device in this session (turn speculation off for a reply or two to measure it). Both rates are tokens after the first ÷ their time, on a machine that may be busy with other work.</source>
        <translation>本条回复的解码速度 ÷ 本次运行中同一模型、同一精度、同一设备上最近几条未使用投机解码的回复的解码速度中位数（关闭投机解码发一两条回复即可测得）。两者都是首个 token 之后的 token 数 ÷ 其用时，机器可能同时忙于其他工作。</translation>
    </message>
    <message>
        <source>Baseline: median {median} tok/s of {samples} plain replies (from {low} to {high}) on {model}, {precision}, {device}.</source>
        <translation>基准：{model}、{precision}、{device} 上 {samples} 条普通回复的中位数 {median} tok/s（范围 {low} 至 {high}）。</translation>
    </message>
    <message>
        <source>No baseline yet: no reply without speculation on {model}, {precision}, {device} has been measured in this session.</source>
        <translation>尚无基准：本次会话中还没有在 {model}、{precision}、{device} 上测得未使用投机解码的回复。</translation>
    </message>
    <message>
        <source>This reply&apos;s decode rate ÷ the decode rate of the last reply without speculation on this model in this session (turn speculation off for one reply to measure it). Both rates are tokens after the first ÷ their time, on a machine that may be busy with other work.</source>
        <translation type="vanished">本条回复的解码速度 ÷ 本次运行中该模型最近一条未用投机解码的回复的解码速度（关闭投机解码生成一条回复即可测得）。两者都是首个 token 之后的 token 数 ÷ 其耗时，而机器可能同时在忙别的工作。</translation>
    </message>
    <message>
        <source>prompt lookup</source>
        <translation>提示词查找</translation>
    </message>
    <message>
        <source>self (int4 copy)</source>
        <translation>自推测（int4 副本）</translation>
    </message>
    <message>
        <source>Speculative decoding</source>
        <translation>投机解码</translation>
    </message>
    <message>
        <source>{rate} ({accepted} of {drafted})</source>
        <translation>{rate}（{drafted} 个中接受 {accepted} 个）</translation>
    </message>
    <message>
        <source>{ratio}× ({rate} vs {plain} tok/s)</source>
        <translation>{ratio}×（{rate} 对比 {plain} tok/s）</translation>
    </message>
    <message>
        <source>{ratio}× ({rate} vs {plain} tok/s plain)</source>
        <translation type="vanished">{ratio}×（{rate} 对比普通解码 {plain} tok/s）</translation>
    </message>
    <message>
        <source>— (no plain reply on this model yet)</source>
        <translation type="vanished">—（该模型尚无普通解码的回复）</translation>
    </message>
</context>
<context>
    <name>StepClock</name>
    <message>
        <source>{step} ({seconds} s)</source>
        <translation>{step}（{seconds} 秒）</translation>
    </message>
</context>
<context>
    <name>ThinkingSection</name>
    <message>
        <source>Show or hide how the model reasoned before answering</source>
        <translation>显示或隐藏模型在回答前的推理过程</translation>
    </message>
    <message>
        <source>The model&apos;s reasoning</source>
        <translation>模型的推理过程</translation>
    </message>
    <message>
        <source>Thinking…</source>
        <translation>正在思考…</translation>
    </message>
    <message>
        <source>Thought</source>
        <translation>已思考</translation>
    </message>
    <message>
        <source>{n} tokens</source>
        <translation>{n} 个 token</translation>
    </message>
    <message>
        <source>1 token</source>
        <translation>1 个 token</translation>
    </message>
    <message>
        <source>{s} s</source>
        <translation>{s} s</translation>
    </message>
</context>
<context>
    <name>ThinkingSwitch</name>
    <message>
        <source>Thinking</source>
        <translation>思考模式</translation>
    </message>
    <message>
        <source>Let the model reason before it answers (this conversation; the model&apos;s template takes the switch). Off: it answers at once.</source>
        <translation>让模型先推理再回答（仅对本对话生效；由模型的对话模板接收这个开关）。关闭时：直接回答。</translation>
    </message>
</context>
<context>
    <name>TokenInspector</name>
    <message>
        <source>token</source>
        <translation>token</translation>
    </message>
    <message>
        <source>top candidates</source>
        <translation>候选 token</translation>
    </message>
    <message>
        <source>Each row is one decode step: the token chosen, its probability, and the runners-up (· marks a space, ∅ a token that completes no character yet).</source>
        <translation>每一行是一步解码：选中的 token、它的概率，以及紧随其后的候选（· 表示空格，∅ 表示该 token 还凑不成一个完整字符）。</translation>
    </message>
    <message>
        <source>Tokens of the reply</source>
        <translation>回复的 token</translation>
    </message>
</context>
<context>
    <name>TokenizerView</name>
    <message>
        <source>Type a text to see how the model cuts it into tokens, e.g. 我昨天认识的那个人</source>
        <translation>输入一段文字，看看模型如何把它切分成 token，例如：我昨天认识的那个人</translation>
    </message>
    <message>
        <source>as a chat turn (with the chat template)</source>
        <translation>作为一轮对话（套用对话模板）</translation>
    </message>
    <message>
        <source>Tokenize</source>
        <translation>分词</translation>
    </message>
    <message>
        <source>Load a model to tokenize.</source>
        <translation>请先加载模型再分词。</translation>
    </message>
    <message>
        <source>token</source>
        <translation>token</translation>
    </message>
    <message>
        <source>text</source>
        <translation>文本</translation>
    </message>
    <message>
        <source>part</source>
        <translation>片段</translation>
    </message>
    <message>
        <source>Text to tokenize</source>
        <translation>要分词的文本</translation>
    </message>
    <message>
        <source>Tokenized again after a short pause</source>
        <translation>停止输入片刻后重新分词</translation>
    </message>
    <message>
        <source>Tokens as coloured pieces</source>
        <translation>以彩色片段显示的 token</translation>
    </message>
    <message>
        <source>Each piece is one token; orange pieces are parts of one character</source>
        <translation>每个片段是一个 token；橙色片段是同一个字符被拆开的各部分</translation>
    </message>
    <message>
        <source>Tokens, one per row</source>
        <translation>token 列表，每行一个</translation>
    </message>
    <message>
        <source>Tokenize the text now</source>
        <translation>立即分词</translation>
    </message>
    <message>
        <source>tokenizing…</source>
        <translation>正在分词…</translation>
    </message>
    <message>
        <source>{tokens} tokens · {chars} characters · {bytes} UTF-8 bytes · {ratio} characters/token · {split} characters split into several tokens</source>
        <translation>{tokens} 个 token · {chars} 个字符 · {bytes} 字节（UTF-8）· 每个 token 平均 {ratio} 个字符 · {split} 个字符被拆成多个 token</translation>
    </message>
    <message>
        <source>special</source>
        <translation>特殊</translation>
    </message>
</context>
<context>
    <name>ToolCallBlock</name>
    <message>
        <source>tool</source>
        <translation>工具</translation>
    </message>
    <message>
        <source>waiting for your answer…</source>
        <translation>等待你的答复…</translation>
    </message>
    <message>
        <source>running…</source>
        <translation>正在运行…</translation>
    </message>
    <message>
        <source>refused:</source>
        <translation>已拒绝：</translation>
    </message>
    <message>
        <source>Arguments:
{arguments}

Result ({ms} ms):
{result}</source>
        <translation>参数：
{arguments}

结果（{ms} ms）：
{result}</translation>
    </message>
    <message>
        <source>A tool the model called while replying: its name, arguments, result and how long the call took (measured around the MCP request). Click for the whole arguments and result.</source>
        <translation>模型在回复时调用的工具：名称、参数、结果以及调用耗时（围绕 MCP 请求计时）。点击查看完整的参数和结果。</translation>
    </message>
    <message>
        <source>Tool call</source>
        <translation>工具调用</translation>
    </message>
</context>
<context>
    <name>ToolConfirmation</name>
    <message>
        <source>Run this tool?</source>
        <translation>运行此工具？</translation>
    </message>
    <message>
        <source>The model wants to run {name}, which may change something.</source>
        <translation>模型想要运行 {name}，它可能会改动某些内容。</translation>
    </message>
    <message>
        <source>Arguments: {arguments}</source>
        <translation>参数：{arguments}</translation>
    </message>
    <message>
        <source>Run</source>
        <translation>运行</translation>
    </message>
    <message>
        <source>Deny</source>
        <translation>拒绝</translation>
    </message>
</context>
<context>
    <name>ToolCostView</name>
    <message>
        <source>Tools and constraints</source>
        <translation>工具与约束</translation>
    </message>
    <message>
        <source>Mask</source>
        <translation>掩码</translation>
    </message>
    <message>
        <source>Constrained decoding (a JSON schema, a forced tool call): each step a mask allows only the tokens that keep the reply valid. &apos;Wait&apos; is the decode loop&apos;s time per token waiting for the mask and applying it (its cost on the critical path); &apos;build&apos; is llguidance computing it, overlapped with the forward. Measured with time.perf_counter around each step, summed over the reply.</source>
        <translation>约束解码（JSON schema、强制的工具调用）：每一步由一个掩码只放行能让回复保持有效的 token。“等待”是解码循环每个 token 等待掩码并应用它的时间（即它在关键路径上的开销）；“构建”是 llguidance 计算掩码的时间，与前向计算重叠进行。在每一步前后用 time.perf_counter 测量，并对整条回复求和。</translation>
    </message>
    <message>
        <source>Tool calls</source>
        <translation>工具调用</translation>
    </message>
    <message>
        <source>Each tool call of the reply: the time from sending the request to the MCP server to its answer (or its failure), measured with time.perf_counter; a refused call took no time.</source>
        <translation>本条回复的每次工具调用：从向 MCP 服务器发出请求到收到应答（或失败）的时间，用 time.perf_counter 测量；被拒绝的调用不耗时。</translation>
    </message>
    <message>
        <source>{wait} ms/token wait · {build} ms/token build · {n} tokens</source>
        <translation>等待 {wait} ms/token · 构建 {build} ms/token · {n} 个 token</translation>
    </message>
    <message>
        <source>Mask: {wait} ms/token wait · {build} ms/token build · {n} tokens</source>
        <translation type="vanished">掩码：等待 {wait} ms/token · 构建 {build} ms/token · {n} 个 token</translation>
    </message>
    <message>
        <source>Tool calls:</source>
        <translation type="vanished">工具调用：</translation>
    </message>
</context>
<context>
    <name>ToolTurns</name>
    <message>
        <source>Tools…</source>
        <translation>工具…</translation>
    </message>
    <message>
        <source>Tools saved for this conversation; they apply to the next reply.</source>
        <translation>已为此对话保存工具设置，从下一条回复起生效。</translation>
    </message>
    <message>
        <source>Tool calls not saved: {why}</source>
        <translation>工具调用未保存：{why}</translation>
    </message>
    <message>
        <source>Starting the tool servers and listing their tools ({servers})…</source>
        <translation>正在启动工具服务器并列出其工具（{servers}）…</translation>
    </message>
</context>
<context>
    <name>ToolsDialog</name>
    <message>
        <source>Tools</source>
        <translation>工具</translation>
    </message>
    <message>
        <source>MCP servers (for every conversation; nothing is started until you list their tools or enable one):</source>
        <translation>MCP 服务器（用于所有对话；在你列出它们的工具或启用其中一个之前，不会启动任何服务器）：</translation>
    </message>
    <message>
        <source>Add</source>
        <translation>添加</translation>
    </message>
    <message>
        <source>Remove</source>
        <translation>移除</translation>
    </message>
    <message>
        <source>List tools</source>
        <translation>列出工具</translation>
    </message>
    <message>
        <source>Tools this conversation may call (a tool that does not say it changes nothing asks you before each run):</source>
        <translation>此对话可以调用的工具（未声明自己不做任何改动的工具，每次运行前都会先询问你）：</translation>
    </message>
    <message>
        <source>The first reply must call a tool</source>
        <translation>第一次回复必须调用工具</translation>
    </message>
    <message>
        <source>Only this conversation&apos;s first reply; later replies call a tool when the model chooses to.</source>
        <translation>仅限本对话的第一条回复；之后的回复由模型自行决定是否调用工具。</translation>
    </message>
    <message>
        <source>Answer as JSON matching this schema</source>
        <translation>以符合此 schema 的 JSON 作答</translation>
    </message>
    <message>
        <source>{name} (not listed yet)</source>
        <translation>{name}（尚未列出）</translation>
    </message>
    <message>
        <source>changes nothing</source>
        <translation>不做任何改动</translation>
    </message>
    <message>
        <source>asks before running</source>
        <translation>运行前询问</translation>
    </message>
    <message>
        <source>Add a server first.</source>
        <translation>请先添加一个服务器。</translation>
    </message>
    <message>
        <source>Starting the servers and listing their tools…</source>
        <translation>正在启动服务器并列出它们的工具…</translation>
    </message>
    <message>
        <source>{n} tools listed.</source>
        <translation>已列出 {n} 个工具。</translation>
    </message>
</context>
<context>
    <name>TtftView</name>
    <message>
        <source>Template, tokens, first pick</source>
        <translation>模板、分词、选首 token</translation>
    </message>
    <message>
        <source>Reused from the cache</source>
        <translation>从缓存复用</translation>
    </message>
    <message>
        <source>Cached document prefix</source>
        <translation>已缓存的文档前缀</translation>
    </message>
    <message>
        <source>Of the reused tokens, those of documents put whole into the prompt that an earlier conversation attaching the same files computed: kept in memory and on disk, so a new conversation on them prefills only its question.</source>
        <translation>复用的 token 中，属于整篇放入提示词的文档、由先前附加了相同文件的对话算好的部分：它们保存在内存和磁盘上，因此基于这些文件的新对话只需预填充它的问题。</translation>
    </message>
    <message>
        <source>{n} of the reused tokens</source>
        <translation>复用的 token 中有 {n} 个</translation>
    </message>
    <message>
        <source>Prefilled</source>
        <translation>预填充</translation>
    </message>
    <message>
        <source>Image tokens</source>
        <translation>图片 token</translation>
    </message>
    <message>
        <source>Vision encoder</source>
        <translation>视觉编码器</translation>
    </message>
    <message>
        <source>Prefill progress</source>
        <translation>预填充进度</translation>
    </message>
    <message>
        <source>Cache stopped matching</source>
        <translation>缓存不再匹配处</translation>
    </message>
    <message>
        <source>KV per 1,000 tokens</source>
        <translation>每多 1,000 个 token 的 KV</translation>
    </message>
    <message>
        <source>Decode per 1,000 tokens</source>
        <translation>每多 1,000 个 token 的解码</translation>
    </message>
    <message>
        <source>Before truncation</source>
        <translation>距离截断</translation>
    </message>
    <message>
        <source>The TTFT outside the prefill: the chat template, tokenisation, finding how much of the prompt the KV cache already holds, and choosing the first token from the prefill&apos;s last logits.</source>
        <translation>首 token 延迟中预填充以外的部分：套用对话模板、分词、查明 KV 缓存中已有多少提示词，以及根据预填充最后的 logits 选出第一个 token。</translation>
    </message>
    <message>
        <source>Prompt tokens whose keys and values the cache kept from the last reply: they cost nothing. A changing prefix (a date in the system prompt) breaks reuse from its first token on.</source>
        <translation>缓存从上一条回复保留了键和值的提示词 token：它们没有任何开销。前缀一旦变化（比如系统提示词里的日期），从变化的第一个 token 起就无法复用。</translation>
    </message>
    <message>
        <source>The tokens each attached picture became (the vision-language model&apos;s own tiling), and the KV cache they take: they are prompt tokens like any other. A follow-up about the same picture at the same place reuses them from the cache.</source>
        <translation>每张附加图片变成的 token 数（按视觉语言模型自己的切块方式），以及它们占用的 KV 缓存：它们和其他提示 token 一样。对同一位置的同一张图片追问时，会从缓存中复用它们。</translation>
    </message>
    <message>
        <source>The vision tower and projector turning the pictures into those tokens&apos; embeddings, once per picture; nothing when the cache held them all.</source>
        <translation>视觉塔和投影层把图片变成这些 token 的嵌入，每张图片一次；缓存已包含全部图片时不运行。</translation>
    </message>
    <message>
        <source>The prompt tokens computed for this reply ÷ the measured prefill rate.</source>
        <translation>本条回复计算的提示词 token 数 ÷ 实测的预填充速度。</translation>
    </message>
    <message>
        <source>The share of this reply&apos;s new prompt tokens computed so far, chunk by chunk, before the first token.</source>
        <translation>第一个 token 出现之前，本条回复的新提示词 token 中已逐块计算完成的比例。</translation>
    </message>
    <message>
        <source>Tokens left in the model&apos;s window. Past them the oldest turns are dropped (the system prompt kept), and the kept conversation is prefilled again: this long at the median prefill rate of recent replies of this model (the range: their fastest and slowest).</source>
        <translation>模型窗口中剩余的词元数。超出后最早的轮次会被丢弃（保留系统提示），保留的对话需重新预填充：按此模型最近回复的预填充速率中位数计算需要这么久（范围：其中最快与最慢）。</translation>
    </message>
    <message>
        <source>{tokens} tokens</source>
        <translation>{tokens} 个 token</translation>
    </message>
    <message>
        <source> · KV {bytes}</source>
        <translation> · KV {bytes}</translation>
    </message>
    <message>
        <source> · {n} of {count} reused from the cache</source>
        <translation> · {count} 张中 {n} 张从缓存复用</translation>
    </message>
    <message>
        <source>not run: the cache held every picture</source>
        <translation>未运行：缓存已包含每张图片</translation>
    </message>
    <message>
        <source>, then ~{time} ({low}–{high}) to prefill the kept conversation again</source>
        <translation>，之后约需 {time}（{low}–{high}）重新预填充保留的对话</translation>
    </message>
    <message>
        <source>The first prompt token the KV cache held something else for: the tokens around it (⟦ ⟧ marks where they part) and the message it is in. Everything from there on was computed again.</source>
        <translation type="vanished">KV 缓存在该位置存着别的内容的第一个提示词 token：它周围的 token（⟦ ⟧ 标出两者分开之处）及其所在的消息。从那里开始的所有内容都重新计算了。</translation>
    </message>
    <message>
        <source>The first prompt token the KV cache held something else for: the tokens around it (⟦ ⟧ marks where they part) and the message it is in. Everything from there on was computed again. A value that changes every turn, such as a date in the system prompt, breaks reuse there each time: put it at the end or leave it out.</source>
        <translation>KV 缓存在该位置存着别的内容的第一个提示词 token：它周围的 token（⟦ ⟧ 标出两者分开之处）及其所在的消息。从那里开始的所有内容都重新计算了。每轮都会变化的值（例如系统提示词中的日期）每次都会在那里打断复用：请把它放到末尾，或者去掉。</translation>
    </message>
    <message>
        <source>The KV cache 1,000 more tokens of conversation will take: 2 × layers × kv heads × head size × bytes, × 1,000.</source>
        <translation>对话再多 1,000 个 token 时 KV 缓存要多占的内存：2 × 层数 × KV 头数 × 头维度 × 每元素字节数，再 × 1,000。</translation>
    </message>
    <message>
        <source>Where decoding is bound by reading memory, each token reads the whole cache: 1,000 more tokens make every token this much slower (their KV bytes ÷ the bytes read per token now).</source>
        <translation>当解码受内存读取限制时，每个 token 都要读一遍整个缓存：再多 1,000 个 token，每个 token 就会慢这么多（它们的 KV 字节数 ÷ 当前每个 token 读取的字节数）。</translation>
    </message>
    <message>
        <source>Tokens left in the model&apos;s window. Past them the oldest turns are dropped (the system prompt kept), and the kept conversation is prefilled again: this long at the measured prefill rate.</source>
        <translation type="vanished">模型上下文窗口中剩余的 token 数。超出之后，最早的几轮对话会被舍弃（系统提示词保留），保留下来的对话要重新预填充：按实测的预填充速度需要这么久。</translation>
    </message>
    <message>
        <source>Why this TTFT</source>
        <translation>首 token 延迟的构成</translation>
    </message>
    <message>
        <source>Context pressure</source>
        <translation>上下文压力</translation>
    </message>
    <message>
        <source>nowhere: the cache matched up to the new message</source>
        <translation>无：缓存一直匹配到新消息为止</translation>
    </message>
    <message>
        <source>{share} % ({done} of {total} tokens)</source>
        <translation>{share} %（{done} / {total} 个 token）</translation>
    </message>
    <message>
        <source>{n} tokens, free</source>
        <translation>{n} 个 token，零开销</translation>
    </message>
    <message>
        <source>{n} tokens ÷ {rate} tok/s</source>
        <translation>{n} 个 token ÷ {rate} tok/s</translation>
    </message>
    <message>
        <source>{n} tokens ÷ {rate} tok/s = {time}</source>
        <translation>{n} 个 token ÷ {rate} tok/s = {time}</translation>
    </message>
    <message>
        <source>+{share} % time per token</source>
        <translation>每个 token 耗时 +{share} %</translation>
    </message>
    <message>
        <source>{n} tokens left</source>
        <translation>剩余 {n} 个 token</translation>
    </message>
    <message>
        <source>, then ~{time} to prefill the kept conversation again</source>
        <translation type="vanished">，之后重新预填充保留的对话约需 {time}</translation>
    </message>
    <message>
        <source>the chat template&apos;s markup</source>
        <translation>聊天模板的标记</translation>
    </message>
    <message>
        <source>the system prompt</source>
        <translation>系统提示词</translation>
    </message>
    <message>
        <source>message {n} (yours)</source>
        <translation>第 {n} 条消息（你的）</translation>
    </message>
    <message>
        <source>message {n} (a reply)</source>
        <translation>第 {n} 条消息（回复）</translation>
    </message>
    <message>
        <source>token {position} in {where}: “{before}⟦{now}⟧” (the cache had “⟦{was}⟧”)</source>
        <translation>{where}中的第 {position} 个 token：“{before}⟦{now}⟧”（缓存中是“⟦{was}⟧”）</translation>
    </message>
    <message>
        <source>{where} changed at “{value}” (was “{was}”), so {n} tokens were recomputed.</source>
        <translation>{where}在“{value}”处变了（原来是“{was}”），所以重新计算了 {n} 个 token。</translation>
    </message>
    <message>
        <source>{where} changed there, so {n} tokens were recomputed.</source>
        <translation>{where}在这里变了，所以重新计算了 {n} 个 token。</translation>
    </message>
</context>
<context>
    <name>VersionPager</name>
    <message>
        <source>Previous version of this message (Left)</source>
        <translation>这条消息的上一个版本（←）</translation>
    </message>
    <message>
        <source>Previous version of this reply (Left)</source>
        <translation>这条回复的上一个版本（←）</translation>
    </message>
    <message>
        <source>Next version of this message (Right)</source>
        <translation>这条消息的下一个版本（→）</translation>
    </message>
    <message>
        <source>Next version of this reply (Right)</source>
        <translation>这条回复的下一个版本（→）</translation>
    </message>
    <message>
        <source>Previous version</source>
        <translation>上一个版本</translation>
    </message>
    <message>
        <source>Next version</source>
        <translation>下一个版本</translation>
    </message>
    <message>
        <source>Version {shown} of {count}</source>
        <translation>第 {shown} 个版本，共 {count} 个</translation>
    </message>
    <message>
        <source>{version}: editing kept the earlier messages, each with the conversation that followed it; page through them with the arrows. The one shown is the one the next reply answers.</source>
        <translation>{version}：编辑保留了之前的消息，以及各自之后的对话，可用箭头翻看。下一条回复接着的是当前显示的这个版本。</translation>
    </message>
    <message>
        <source>{version}: Regenerate kept the earlier replies; page through them with the arrows. The one shown is the one the next reply answers.</source>
        <translation>{version}：“重新生成”保留了之前的回复，可用箭头翻看。下一条回复接着的是当前显示的这个版本。</translation>
    </message>
</context>
<context>
    <name>Versions</name>
    <message>
        <source>Reply versions not saved: {why}</source>
        <translation>回复版本未保存：{why}</translation>
    </message>
</context>
<context>
    <name>engine</name>
    <message>
        <source>checking files</source>
        <translation>检查文件</translation>
    </message>
    <message>
        <source>reading config</source>
        <translation>读取配置</translation>
    </message>
    <message>
        <source>loading weights</source>
        <translation>加载权重</translation>
    </message>
    <message>
        <source>quantizing</source>
        <translation>量化中</translation>
    </message>
    <message>
        <source>quantized weights from the cache</source>
        <translation>从缓存读取量化权重</translation>
    </message>
    <message>
        <source>loading tokenizer</source>
        <translation>加载分词器</translation>
    </message>
    <message>
        <source>ready</source>
        <translation>就绪</translation>
    </message>
    <message>
        <source>checking quantized quality</source>
        <translation>检查量化后的质量</translation>
    </message>
    <message>
        <source>1 · Greedy decode, 20 tokens</source>
        <translation>1 · 贪心解码 20 个 token</translation>
    </message>
    <message>
        <source>Greedy decode of 20 tokens, repeated: total time, TTFT and average tok/s (median and spread).</source>
        <translation>多次重复贪心解码 20 个 token：测总耗时、首 token 延迟（TTFT）和平均 tok/s（取中位数并给出波动范围）。</translation>
    </message>
    <message>
        <source>2 · TTFT vs prompt length</source>
        <translation>2 · 首 token 延迟与提示词长度</translation>
    </message>
    <message>
        <source>English and Chinese prompts from ~10 to ~500 characters: TTFT and prefill tok/s.</source>
        <translation>用约 10 到 500 个字符的中英文提示词，测首 token 延迟（TTFT）和预填充速度 tok/s：提示词越长，预填充越久。</translation>
    </message>
    <message>
        <source>3 · KV cache on vs off</source>
        <translation>3 · KV 缓存开与关</translation>
    </message>
    <message>
        <source>The same input with the KV cache on and off: latency per generated token, ratio, same text?</source>
        <translation>同一输入分别开启和关闭 KV 缓存：比较每生成一个 token 的延迟和两者倍数，并检查生成的文本是否相同。</translation>
    </message>
    <message>
        <source>4 · Sampling vs greedy</source>
        <translation>4 · 采样与贪心解码</translation>
    </message>
    <message>
        <source>Temperature 0.9 + top-p 0.9 against greedy over several seeds: repetition rate, distinct-1/2.</source>
        <translation>用多个随机种子，对比温度 0.9 + top-p 0.9 的采样与贪心解码：重复率和 distinct-1/2。</translation>
    </message>
    <message>
        <source>5 · Attention heatmap</source>
        <translation>5 · 注意力热力图</translation>
    </message>
    <message>
        <source>Attention weights of one layer and head over a sentence with a pronoun; sink/collapse flags.</source>
        <translation>某一层某个注意力头在一句含代词的句子上的注意力权重；标出注意力汇聚点（sink）与注意力坍缩。</translation>
    </message>
    <message>
        <source>Precision A/B (bf16 / int8 / int4)</source>
        <translation>精度 A/B 对比（bf16 / int8 / int4）</translation>
    </message>
    <message>
        <source>Loads the model again in bf16, int8 and int4, one after another (temporarily uses extra memory): decode tok/s, TTFT, weights size, identical greedy text?</source>
        <translation>依次以 bf16、int8 和 int4 重新加载模型（会临时占用额外内存）：比较解码 tok/s、首 token 延迟、权重大小，以及贪心解码的文本是否一致。</translation>
    </message>
    <message>
        <source>Whole text vs retrieval</source>
        <translation>全文与检索对比</translation>
    </message>
    <message>
        <source>A real document (Vim&apos;s tutor, English and Chinese) cut to several lengths, put whole into the prompt or as retrieved passages: TTFT, prefill tokens and KV cache bytes against its length.</source>
        <translation>把一篇真实文档（Vim 教程，英文和中文）截成几种长度，整篇放进提示词或只放检索到的段落：TTFT、预填充 token 数和 KV 缓存字节数随文档长度的变化。</translation>
    </message>
    <message>
        <source>What an image costs</source>
        <translation>一张图片的代价</translation>
    </message>
    <message>
        <source>One picture at sizes from 224×224 to 2048×1536 on a vision-language model: TTFT split into the vision encoder and the prefill, image tokens and KV cache bytes against its resolution.</source>
        <translation>在视觉语言模型上用 224×224 到 2048×1536 的不同尺寸输入一张图片：首 token 延迟拆分为视觉编码器与预填充两部分，以及图像 token 数和 KV 缓存字节数随分辨率的变化。</translation>
    </message>
    <message>
        <source>Speculative decoding</source>
        <translation>投机解码</translation>
    </message>
    <message>
        <source>Plain and prompt-lookup decoding at draft lengths 1-8 on a repeat-heavy prompt and a fresh one: speed-up against draft length and acceptance, tokens per step, identical greedy text?</source>
        <translation>在一个重复内容多的提示词和一个全新的提示词上，以 1-8 的草稿长度对比普通解码与提示词查找解码：加速比随草稿长度和接受率的变化、每步 token 数，以及贪心解码的文本是否相同。</translation>
    </message>
    <message>
        <source>cancelled</source>
        <translation>已取消</translation>
    </message>
    <message>
        <source>no model loaded: choose a model and press Load</source>
        <translation>尚未加载模型：请选择模型并点击“加载”</translation>
    </message>
    <message>
        <source>the smallest that answers in Chinese and English; fast anywhere</source>
        <translation>能用中英文回答的最小模型；在哪儿都跑得快</translation>
    </message>
    <message>
        <source>good everyday answers in Chinese and English on a laptop CPU</source>
        <translation>在笔记本 CPU 上就能给出不错的中英文日常回答</translation>
    </message>
    <message>
        <source>noticeably better answers; wants a desktop CPU or a GPU</source>
        <translation>回答明显更好；需要台式机 CPU 或 GPU</translation>
    </message>
    <message>
        <source>thinks before answering (can be switched off); strong in Chinese</source>
        <translation>先思考再回答（可关闭）；中文能力强</translation>
    </message>
    <message>
        <source>a reasoning model that holds its own on maths and code</source>
        <translation>推理模型，数学和代码表现不俗</translation>
    </message>
    <message>
        <source>Google’s small multilingual chat model</source>
        <translation>Google 的小型多语言对话模型</translation>
    </message>
    <message>
        <source>Meta’s small model; English first</source>
        <translation>Meta 的小模型；以英文为主</translation>
    </message>
    <message>
        <source>Meta’s 3B: better English answers</source>
        <translation>Meta 的 3B 模型：英文回答更好</translation>
    </message>
    <message>
        <source>Microsoft’s 3.8B: strong reasoning for its size</source>
        <translation>Microsoft 的 3.8B 模型：同等规模下推理能力很强</translation>
    </message>
    <message>
        <source>the default model’s big sibling (same tokenizer); English</source>
        <translation>默认模型的大号版本（分词器相同）；英文</translation>
    </message>
    <message>
        <source>{model} was not found: open a model folder or a .gguf file (the default model needs `python -m engine fetch` once)</source>
        <translation>找不到 {model}：请打开一个模型文件夹或 GGUF 文件（默认模型需要先运行一次 `python -m engine fetch`）</translation>
    </message>
    <message>
        <source>a file of {model} is damaged or incomplete</source>
        <translation>{model} 的文件已损坏或不完整</translation>
    </message>
    <message>
        <source>{model} was refused: loading it could run code hidden in its files</source>
        <translation>已拒绝加载 {model}：加载它可能会执行藏在模型文件里的代码</translation>
    </message>
    <message>
        <source>{model} asks to run its own Python code</source>
        <translation>{model} 要求运行它自带的 Python 代码</translation>
    </message>
    <message>
        <source>not enough memory for {model}: try int8 or int4, or another device</source>
        <translation>内存不足，无法加载 {model}：试试 int8 或 int4，或换一个设备</translation>
    </message>
    <message>
        <source>loading {model} was cancelled</source>
        <translation>已取消加载 {model}</translation>
    </message>
    <message>
        <source>{model} cannot be loaded with this precision on this device</source>
        <translation>无法在此设备上以该精度加载 {model}</translation>
    </message>
    <message>
        <source>{model} could not be loaded</source>
        <translation>无法加载 {model}</translation>
    </message>
    <message>
        <source>{server} does not serve the model {model}: choose one it lists</source>
        <translation>{server} 上没有部署模型 {model}：请从它列出的模型中选择一个</translation>
    </message>
    <message>
        <source>the server&apos;s address {server} cannot be used</source>
        <translation>服务器地址 {server} 不可用</translation>
    </message>
    <message>
        <source>connecting to {server} was cancelled</source>
        <translation>已取消连接 {server}</translation>
    </message>
    <message>
        <source>could not connect to {server} or use its model {model}</source>
        <translation>无法连接 {server}，或无法使用其上的模型 {model}</translation>
    </message>
</context>
<context>
    <name>history</name>
    <message>
        <source>History file was damaged ({problem}); a copy is kept at {copy}. Recovered {conversations} conversations and {messages} messages.</source>
        <translation>历史记录文件已损坏（{problem}）；原文件的副本保存在 {copy}。已恢复 {conversations} 个对话、{messages} 条消息。</translation>
    </message>
    <message>
        <source>Opened {file} read-only: it was written by a newer Miaohui (schema v{version}); new chats will not be saved.</source>
        <translation>已以只读方式打开 {file}：它由更新版本的 Miaohui 写入（schema v{version}），新的对话不会被保存。</translation>
    </message>
    <message>
        <source>Opened {file} read-only: it was written by a newer Miaohui (schema v{version}) and looks damaged ({problem}).</source>
        <translation>已以只读方式打开 {file}：它由更新版本的 Miaohui 写入（schema v{version}），且似乎已损坏（{problem}）。</translation>
    </message>
    <message>
        <source>History at {path} cannot be written ({reason}); it is shown read-only and new chats will not be saved.</source>
        <translation>无法写入历史记录 {path}（{reason}）；将以只读方式显示，新的对话不会被保存。</translation>
    </message>
    <message>
        <source>History at {path} cannot be opened ({reason}); this session&apos;s chats are kept in memory only.</source>
        <translation>无法打开历史记录 {path}（{reason}）；本次会话的对话只保存在内存中。</translation>
    </message>
    <message>
        <source>History upgraded from schema v{old} to v{new}; a backup of the old file is at {backup}.</source>
        <translation>历史记录已从 schema v{old} 升级到 v{new}；旧文件的备份在 {backup}。</translation>
    </message>
    <message>
        <source>Some history from the newer version cannot be read here.</source>
        <translation>部分由更新版本写入的历史记录无法在此读取。</translation>
    </message>
    <message>
        <source>{count} damaged messages cannot be shown (ids {ids}).</source>
        <translation>{count} 条损坏的消息无法显示（id：{ids}）。</translation>
    </message>
    <message>
        <source>{count} damaged messages were repaired for display (ids {ids}).</source>
        <translation>{count} 条损坏的消息已修复后显示（id：{ids}）。</translation>
    </message>
    <message>
        <source>{count} damaged conversations were repaired for display (ids {ids}).</source>
        <translation>{count} 个损坏的对话已修复后显示（id：{ids}）。</translation>
    </message>
    <message>
        <source>it cannot be read as a database</source>
        <translation>无法作为数据库读取</translation>
    </message>
    <message>
        <source>it fails SQLite&apos;s integrity check</source>
        <translation>未通过 SQLite 完整性检查</translation>
    </message>
    <message>
        <source>not a Miaohui history file</source>
        <translation>不是 Miaohui 的历史记录文件</translation>
    </message>
    <message>
        <source>tables are missing</source>
        <translation>缺少数据表</translation>
    </message>
    <message>
        <source>no permission</source>
        <translation>没有权限</translation>
    </message>
    <message>
        <source>another Miaohui has been opening it for too long</source>
        <translation>另一个 Miaohui 打开它的时间过长</translation>
    </message>
    <message>
        <source>a file stands where its folder should be</source>
        <translation>它的文件夹所在位置是一个文件</translation>
    </message>
    <message>
        <source>the disk is full</source>
        <translation>磁盘已满</translation>
    </message>
    <message>
        <source>a newer Miaohui upgraded it meanwhile</source>
        <translation>期间已被更新版本的 Miaohui 升级</translation>
    </message>
    <message>
        <source>{detail}</source>
        <translation>{detail}</translation>
    </message>
</context>
<context>
    <name>main</name>
    <message>
        <source>

Details were written to {path}.</source>
        <translation>

详细信息已写入 {path}。</translation>
    </message>
    <message>
        <source>Something went wrong inside Miaohui:
{line}{where}

The app keeps running; if it misbehaves, restart it.</source>
        <translation>秒回内部出错了：
{line}{where}

程序仍在运行；如果表现异常，请重新启动。</translation>
    </message>
    <message>
        <source>Miaohui hit a bug</source>
        <translation>秒回遇到了一个错误</translation>
    </message>
    <message>
        <source>{problem}; this session&apos;s chats are kept in memory only</source>
        <translation>{problem}；本次运行的对话只保存在内存中</translation>
    </message>
</context>
</TS>
